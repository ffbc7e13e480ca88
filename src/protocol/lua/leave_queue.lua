local n = #KEYS / 4
local waiter, token = ARGV[1], ARGV[3]
local mine = RESERVED .. waiter
for i = 1, n do
    local key, queue, deadlines = KEYS[i], KEYS[n + 2 * i - 1], KEYS[n + 2 * i]
    redis.call("ZREM", queue, waiter)
    redis.call("HDEL", deadlines, waiter, GRANT .. waiter)
    local value = redis.call("GET", key)
    if value == mine or (token and value == token) then
        redis.call("DEL", key)
        pass_on(key, queue, deadlines, KEYS[3 * n + i], ARGV[2])
    end
end
return 1

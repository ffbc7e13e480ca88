local n = #KEYS / 4
local waiter = ARGV[1]
local mine = RESERVED .. waiter
for i = 1, n do
    local key, queue, deadlines = KEYS[i], KEYS[n + 2 * i - 1], KEYS[n + 2 * i]
    redis.call("ZREM", queue, waiter)
    redis.call("HDEL", deadlines, waiter, GRANT .. waiter)
    local value = redis.call("GET", key)
    local granted = value and redis.call("HGET", deadlines, GRANTED .. value) == waiter
    if value == mine or granted then
        redis.call("DEL", key)
        if granted then
            redis.call("HDEL", deadlines, GRANTED .. value)
        end
        pass_on(key, queue, deadlines, KEYS[3 * n + i], ARGV[2])
    end
end
return 1

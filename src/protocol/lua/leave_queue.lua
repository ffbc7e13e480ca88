local n = #KEYS / 4
local mine = RESERVED .. ARGV[1]
for i = 1, n do
    local key, queue, deadlines = KEYS[i], KEYS[n + 2 * i - 1], KEYS[n + 2 * i]
    redis.call("ZREM", queue, ARGV[1])
    redis.call("HDEL", deadlines, ARGV[1])
    if redis.call("GET", key) == mine then
        redis.call("DEL", key)
        pass_on(key, queue, deadlines, KEYS[3 * n + i], ARGV[2])
    end
end
return 1

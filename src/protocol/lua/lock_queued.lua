local n = #KEYS - 2
local queue, deadlines = KEYS[n + 1], KEYS[n + 2]
local mine = RESERVED .. ARGV[3]
for i = 1, n do
    local value = redis.call("GET", KEYS[i])
    if (value and value ~= mine) or held_shared(KEYS[i]) then
        local lifetime = tonumber(ARGV[5])
        redis.call("ZADD", queue, ARGV[4], ARGV[3])
        redis.call("HSET", deadlines, ARGV[3], now_ms() + lifetime)
        for _, key in ipairs({queue, deadlines}) do
            if redis.call("PTTL", key) < lifetime then
                redis.call("PEXPIRE", key, lifetime)
            end
        end
        return 0
    end
end
for i = 1, n do
    redis.call("SET", KEYS[i], ARGV[1], "PX", ARGV[2])
end
redis.call("ZREM", queue, ARGV[3])
redis.call("HDEL", deadlines, ARGV[3])
return 1

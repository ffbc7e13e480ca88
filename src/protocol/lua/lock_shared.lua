if redis.call("EXISTS", KEYS[2]) == 1 or redis.call("EXISTS", KEYS[4]) == 1 then
    return 0
end
for _, reader in ipairs(redis.call("ZRANGE", KEYS[3], 0, -1)) do
    if redis.call("EXISTS", reader) == 0 then
        redis.call("ZREM", KEYS[3], reader)
    end
end
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
    return 0
end
redis.call("ZADD", KEYS[3], 0, KEYS[1])
return 1

local readers = 0
for _, reader in ipairs(redis.call("ZRANGE", KEYS[2], 0, -1)) do
    if redis.call("EXISTS", reader) == 1 then
        readers = readers + 1
    else
        redis.call("ZREM", KEYS[2], reader)
    end
end
if readers > 0 or redis.call("EXISTS", KEYS[1]) == 1 then
    local waiting = tonumber(ARGV[3])
    if waiting > 0 and redis.call("PTTL", KEYS[3]) < waiting then
        redis.call("SET", KEYS[3], "1", "PX", waiting)
    end
    return 0
end
redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
redis.call("DEL", KEYS[3])
return 1

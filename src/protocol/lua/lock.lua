for _, key in ipairs(KEYS) do
    if redis.call("EXISTS", key) == 1 or held_shared(key) then
        return 0
    end
end
for _, key in ipairs(KEYS) do
    redis.call("SET", key, ARGV[1], "PX", ARGV[2])
end
return 1

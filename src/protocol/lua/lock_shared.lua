if redis.call("EXISTS", KEYS[2]) == 1 or redis.call("EXISTS", KEYS[4]) == 1 then
    return 0
end
local listed = redis.call("ZRANGE", KEYS[3], 0, -1, "WITHSCORES")
for i = 1, #listed, 2 do
    if redis.call("EXISTS", listed[i]) == 0 then
        redis.call("ZREM", KEYS[3], listed[i])
    elseif tonumber(listed[i + 1]) ~= 0 then
        return string.format("held-as:%d", tonumber(listed[i + 1]))
    end
end
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
    return 0
end
local left = redis.call("PTTL", KEYS[3])
redis.call("ZADD", KEYS[3], 0, KEYS[1])
outlast(KEYS[3], left, tonumber(ARGV[2]))
return 1

local last = tonumber(redis.call("GET", KEYS[2]) or "0")
local token = tonumber(ARGV[1])
if token < last then
    return 0
end
redis.call("SET", KEYS[2], ARGV[1])
redis.call("SET", KEYS[1], ARGV[2])
return 1

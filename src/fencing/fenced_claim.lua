local last = tonumber(redis.call("GET", KEYS[1]) or "0")
local token = tonumber(ARGV[1])
if token < last then
    return 0
end
redis.call("SET", KEYS[1], ARGV[1])
return 1

if redis.call("GET", KEYS[1]) ~= ARGV[1] then
    return 0
end
local left = redis.call("PTTL", KEYS[1])
if left > 0 then
    redis.call("SET", KEYS[2], ARGV[1] .. " " .. ARGV[2], "PX", left)
else
    redis.call("SET", KEYS[2], ARGV[1] .. " " .. ARGV[2])
end
return 1

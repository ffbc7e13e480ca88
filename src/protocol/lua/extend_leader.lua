if redis.call("GET", KEYS[1]) ~= ARGV[1] then
    return 0
end
redis.call("PEXPIRE", KEYS[1], ARGV[2])
local record = redis.call("GET", KEYS[2])
if record and string.sub(record, 1, #ARGV[1] + 1) == ARGV[1] .. " " then
    redis.call("PEXPIRE", KEYS[2], ARGV[2])
end
return 1

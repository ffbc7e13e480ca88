local n = #KEYS - 1
for i = 1, n do
    if redis.call("GET", KEYS[i]) ~= ARGV[1] then
        return 0
    end
end
for i = 1, n do
    redis.call("PEXPIRE", KEYS[i], ARGV[2])
end
local list = KEYS[n + 1]
outlast(list, redis.call("PTTL", list), tonumber(ARGV[2]))
return 1

local n = #KEYS - 1
for i = 1, n do
    if redis.call("EXISTS", KEYS[i]) == 1 or held_shared(KEYS[i]) then
        local marker, interest = KEYS[n + 1], tonumber(ARGV[3])
        if redis.call("PTTL", marker) < interest then
            redis.call("SET", marker, "1", "PX", interest)
        end
        return 0
    end
end
for i = 1, n do
    redis.call("SET", KEYS[i], ARGV[1], "PX", ARGV[2])
end
return 1

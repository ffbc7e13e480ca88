local n = #KEYS / 4
local all = 1
for i = 1, n do
    local key = KEYS[i]
    if redis.call("GET", key) == ARGV[1] then
        redis.call("DEL", key)
        local queue, deadlines, watched = KEYS[n + 2 * i - 1], KEYS[n + 2 * i], KEYS[3 * n + i]
        if redis.call("EXISTS", queue, watched, deadlines) > 0 then
            redis.call("HDEL", deadlines, GRANTED .. ARGV[1])
            pass_on(key, queue, deadlines, watched, ARGV[2])
        end
    else
        all = 0
    end
end
return all

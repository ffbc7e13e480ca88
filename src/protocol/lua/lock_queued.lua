local n = #KEYS - 2
local queue, deadlines = KEYS[n + 1], KEYS[n + 2]
local waiter = ARGV[3]
local mine = RESERVED .. waiter
local stamp = ARGV[6]
-- Each key's value, read once (false: no key).
local values = {}
for i = 1, n do
    values[i] = redis.call("GET", KEYS[i])
end
if stamp then
    -- Granted to an earlier place of this waiter (in that refresh's token, after it was
    -- sent): taken as this refresh's, set to this refresh's token with a fresh TTL, after
    -- this request was sent. A rollback of the earlier refresh, however late it lands,
    -- deletes only a key in the earlier token.
    local granted = true
    for i = 1, n do
        if not values[i] or redis.call("HGET", deadlines, GRANTED .. values[i]) ~= waiter then
            granted = false
            break
        end
    end
    if granted then
        for i = 1, n do
            redis.call("HDEL", deadlines, GRANTED .. values[i])
            redis.call("SET", KEYS[i], ARGV[1], "PX", tonumber(ARGV[2]))
        end
        redis.call("ZREM", queue, waiter)
        redis.call("HDEL", deadlines, waiter, GRANT .. waiter)
        return 1
    end
end
for i = 1, n do
    local value = values[i]
    if (value and value ~= mine) or held_shared(KEYS[i]) then
        local lifetime = tonumber(ARGV[5])
        redis.call("ZADD", queue, ARGV[4], waiter)
        if stamp then
            redis.call("HSET", deadlines, waiter, now_ms() + lifetime,
                GRANT .. waiter, ARGV[1] .. " " .. ARGV[2] .. " " .. stamp)
        else
            redis.call("HSET", deadlines, waiter, now_ms() + lifetime)
        end
        keep_line(queue, deadlines, lifetime)
        return 0
    end
end
for i = 1, n do
    redis.call("SET", KEYS[i], ARGV[1], "PX", ARGV[2])
end
redis.call("ZREM", queue, waiter)
redis.call("HDEL", deadlines, waiter, GRANT .. waiter)
return 1

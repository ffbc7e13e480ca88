local n = #KEYS - 2
local queue, deadlines = KEYS[n + 1], KEYS[n + 2]
local waiter = ARGV[3]
local mine = RESERVED .. waiter
local stamp = ARGV[6]
if stamp then
    -- Granted to an earlier place of this waiter (in that refresh's token, after it was
    -- sent): taken as this refresh's, set to this refresh's token with a fresh TTL, after
    -- this request was sent. A rollback of the earlier refresh, however late it lands,
    -- deletes only a key in the earlier token.
    local granted = true
    for i = 1, n do
        local value = redis.call("GET", KEYS[i])
        if not value or redis.call("HGET", deadlines, GRANTED .. value) ~= waiter then
            granted = false
            break
        end
    end
    if granted then
        for i = 1, n do
            redis.call("HDEL", deadlines, GRANTED .. redis.call("GET", KEYS[i]))
            redis.call("SET", KEYS[i], ARGV[1], "PX", tonumber(ARGV[2]))
        end
        redis.call("ZREM", queue, waiter)
        redis.call("HDEL", deadlines, waiter, GRANT .. waiter)
        return 1
    end
end
for i = 1, n do
    local value = redis.call("GET", KEYS[i])
    if (value and value ~= mine) or held_shared(KEYS[i]) then
        local lifetime = tonumber(ARGV[5])
        redis.call("ZADD", queue, ARGV[4], waiter)
        redis.call("HSET", deadlines, waiter, now_ms() + lifetime)
        if stamp then
            redis.call("HSET", deadlines, GRANT .. waiter, ARGV[1] .. " " .. ARGV[2] .. " " .. stamp)
        end
        for _, key in ipairs({queue, deadlines}) do
            if redis.call("PTTL", key) < lifetime then
                redis.call("PEXPIRE", key, lifetime)
            end
        end
        return 0
    end
end
for i = 1, n do
    redis.call("SET", KEYS[i], ARGV[1], "PX", ARGV[2])
end
redis.call("ZREM", queue, waiter)
redis.call("HDEL", deadlines, waiter, GRANT .. waiter)
return 1

local n = #KEYS / 4
local waiter = ARGV[3]
local mine = RESERVED .. waiter
local blocked, stay
for i = 1, n do
    local value = redis.call("GET", KEYS[i])
    if (value and value ~= mine) or held_shared(KEYS[i]) then
        blocked = blocked or i
        if not stay and redis.call("ZSCORE", KEYS[n + 2 * i - 1], waiter) then
            stay = i
        end
    end
end
if blocked then
    local at = stay or blocked
    for i = 1, n do
        if i ~= at then
            redis.call("ZREM", KEYS[n + 2 * i - 1], waiter)
            redis.call("HDEL", KEYS[n + 2 * i], waiter)
        end
    end
    local queue, deadlines = KEYS[n + 2 * at - 1], KEYS[n + 2 * at]
    local lifetime = tonumber(ARGV[5])
    redis.call("ZADD", queue, ARGV[4], waiter)
    redis.call("HSET", deadlines, waiter, now_ms() + lifetime)
    keep_line(queue, deadlines, lifetime)
    for i = 1, n do
        if redis.call("GET", KEYS[i]) == mine then
            redis.call("DEL", KEYS[i])
            pass_on(KEYS[i], KEYS[n + 2 * i - 1], KEYS[n + 2 * i], KEYS[3 * n + i], ARGV[6])
        end
    end
    return 0
end
for i = 1, n do
    redis.call("SET", KEYS[i], ARGV[1], "PX", ARGV[2])
    redis.call("ZREM", KEYS[n + 2 * i - 1], waiter)
    redis.call("HDEL", KEYS[n + 2 * i], waiter)
end
return 1

-- Whether a shared holder of the lock key `key` (a reader of its read-write lock, or a
-- permit of its semaphore) is live: an entry listed in `key`'s holder list that still
-- exists. A listed name whose entry is gone is a holder that left, and is dropped. An idle
-- name has no list, which costs one EXISTS.
local function held_shared(key)
    local list = "quorumlock:readers:" .. key
    if redis.call("EXISTS", list) == 0 then
        return false
    end
    local held = false
    for _, entry in ipairs(redis.call("ZRANGE", list, 0, -1)) do
        if redis.call("EXISTS", entry) == 1 then
            held = true
        else
            redis.call("ZREM", list, entry)
        end
    end
    return held
end

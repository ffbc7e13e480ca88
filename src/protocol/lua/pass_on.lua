-- Hands the freed `key` to the first waiter in `queue` whose place has not lapsed, and
-- announces it on the waiter's client channel (the id is "<client>:<random>"), or, when
-- nobody is in line, "" on `channel .. key` (free for anybody) if the `watched` marker asks
-- for it. No announcement when `channel` is empty. Lapsed places met on the way are removed.
-- A place with grant terms (a waiter of the direct grant) is granted the key: set to the
-- token of the refresh that wrote the place, with its TTL, recorded as granted to the waiter,
-- and announced as "<waiter> <stamp>", that refresh's stamp. Any other place, or one beside a live shared holder, is reserved
-- the key (`RESERVED .. waiter`) until the place would lapse, announced as "<waiter>".
local function pass_on(key, queue, deadlines, watched, channel)
    local next_waiter, stamp = "", nil
    local now
    for _ = 1, 100 do
        local head = redis.call("ZRANGE", queue, 0, 0)[1]
        if not head then
            break
        end
        now = now or now_ms()
        local lapses = tonumber(redis.call("HGET", deadlines, head))
        local terms = redis.call("HGET", deadlines, GRANT .. head)
        redis.call("ZREM", queue, head)
        redis.call("HDEL", deadlines, head, GRANT .. head)
        if lapses and lapses > now then
            local token, ttl, granted
            if terms then
                token, ttl, granted = string.match(terms, "^(%S+) (%d+) (%d+)$")
            end
            if token and not held_shared(key) then
                redis.call("SET", key, token, "PX", ttl)
                redis.call("HSET", deadlines, GRANTED .. token, head)
                -- The record lives as long as the grant: the waiter's next refresh or its
                -- leave finds it while the key may be in its token, and it never outlives
                -- the line's last use by more than twice that.
                outlive(deadlines, tonumber(ttl))
                stamp = granted
            else
                redis.call("SET", key, RESERVED .. head, "PX", lapses - now)
            end
            next_waiter = head
            break
        end
    end
    if channel == "" then
        return
    end
    if channel == "quorumlock:shard-released:" then
        -- A Redis Cluster member: sharded pub/sub, in the key's own slot. A client's
        -- channel would hash to another slot, so a reservation or a grant is not announced
        -- there (its waiter learns of it from its next attempt).
        if next_waiter == "" and redis.call("EXISTS", watched) == 1 then
            redis.call("SPUBLISH", channel .. key, "")
        end
        return
    end
    local client = string.match(next_waiter, "^(.+):[^:]*$")
    if client then
        local message = next_waiter
        if stamp then
            message = next_waiter .. " " .. stamp
        end
        redis.call("PUBLISH", "quorumlock:waiter:" .. client, message)
    elseif redis.call("EXISTS", watched) == 1 then
        redis.call("PUBLISH", channel .. key, next_waiter)
    end
end

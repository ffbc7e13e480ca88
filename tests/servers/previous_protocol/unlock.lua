-- The release script of the version before the direct grant (quorumlock at 421f709: the
-- scripts queue.lua, pass_on.lua and unlock.lua of src/protocol/lua/, joined as the crate
-- joins them; SHA-1 eb08612acf7e1a16f189c9bc58112bbf6381b055 without this comment), for
-- tests/servers/fairness.rs to release with as a client of that version would.

local RESERVED = "quorumlock:reserved:"

local function now_ms()
    local time = redis.call("TIME")
    return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- Reserves the freed `key` for the first waiter in `queue` whose place has not lapsed,
-- until that place would lapse, and announces it: the waiter's id on its client's channel
-- (the id is "<client>:<random>"), or, when nobody is in line, "" on `channel .. key`
-- (free for anybody) if the `watched` marker asks for it. No announcement when `channel`
-- is empty. Lapsed places met on the way are removed.
local function pass_on(key, queue, deadlines, watched, channel)
    local next_waiter = ""
    if redis.call("EXISTS", queue) == 1 then
        local now = now_ms()
        for _ = 1, 100 do
            local head = redis.call("ZRANGE", queue, 0, 0)[1]
            if not head then
                break
            end
            local lapses = tonumber(redis.call("HGET", deadlines, head))
            redis.call("ZREM", queue, head)
            redis.call("HDEL", deadlines, head)
            if lapses and lapses > now then
                redis.call("SET", key, RESERVED .. head, "PX", lapses - now)
                next_waiter = head
                break
            end
        end
    end
    if channel == "" then
        return
    end
    if channel == "quorumlock:shard-released:" then
        -- A Redis Cluster member: sharded pub/sub, in the key's own slot. A client's
        -- channel would hash to another slot, so a reservation is not announced there
        -- (its waiter claims it on its retry delay).
        if next_waiter == "" and redis.call("EXISTS", watched) == 1 then
            redis.call("SPUBLISH", channel .. key, "")
        end
        return
    end
    local client = string.match(next_waiter, "^(.+):[^:]*$")
    if client then
        redis.call("PUBLISH", "quorumlock:waiter:" .. client, next_waiter)
    elseif redis.call("EXISTS", watched) == 1 then
        redis.call("PUBLISH", channel .. key, next_waiter)
    end
end

local n = #KEYS / 4
local all = 1
for i = 1, n do
    local key = KEYS[i]
    if redis.call("GET", key) == ARGV[1] then
        redis.call("DEL", key)
        local queue, watched = KEYS[n + 2 * i - 1], KEYS[3 * n + i]
        if redis.call("EXISTS", queue, watched) > 0 then
            pass_on(key, queue, KEYS[n + 2 * i], watched, ARGV[2])
        end
    else
        all = 0
    end
end
return all

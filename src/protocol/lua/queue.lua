local RESERVED = "quorumlock:reserved:"
-- A place's grant terms in the line's deadlines hash, beside its lapse: "<token> <ttl> <stamp>",
-- written by a client of the direct grant (older scripts neither read nor write the field).
local GRANT = "grant:"
-- A granted key's record in the same hash, "granted:<token>" naming the waiter it was granted
-- to: its next refresh takes the key as its own, its leave gives it back, the key's release
-- forgets it.
local GRANTED = "granted:"

local function now_ms()
    local time = redis.call("TIME")
    return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- Keeps `key` (a line's queue or deadlines) alive for at least `ms`: one with less left is
-- given twice that, so that a busy line pays one PEXPIRE per `ms` rather than one per
-- call. Its expiry only ever rises.
local function outlive(key, ms)
    if redis.call("PTTL", key) < ms then
        redis.call("PEXPIRE", key, 2 * ms)
    end
end

-- Keeps a line alive for at least `lifetime` ms, the life of a place just written.
local function keep_line(queue, deadlines, lifetime)
    outlive(queue, lifetime)
    outlive(deadlines, lifetime)
end

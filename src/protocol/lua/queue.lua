local RESERVED = "quorumlock:reserved:"
-- A place's grant terms in the line's deadlines hash, beside its lapse: "<token> <ttl> <stamp>",
-- written by a client of the direct grant (older scripts neither read nor write the field).
local GRANT = "grant:"

local function now_ms()
    local time = redis.call("TIME")
    return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

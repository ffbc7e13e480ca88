local RESERVED = "quorumlock:reserved:"

local function now_ms()
    local time = redis.call("TIME")
    return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

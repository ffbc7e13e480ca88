-- Extends many leases, each on its own: all of one lease's keys or none, only where every
-- one of them holds its token; never creates a key.
-- KEYS: each lease's keys, followed by its holder list or leader record when it has one.
-- ARGV: the TTL in ms, then per lease its token, its number of keys, and what is beside
-- them: "-" nothing, "l" a holder list, "r" a leader record.
-- Returns one character per lease, in order: "1" extended, "0" refused.
local ttl = tonumber(ARGV[1])
local flags = {}
local k = 1
for a = 2, #ARGV, 3 do
    local token, n, beside = ARGV[a], tonumber(ARGV[a + 1]), ARGV[a + 2]
    local held = true
    for i = k, k + n - 1 do
        if redis.call("GET", KEYS[i]) ~= token then
            held = false
            break
        end
    end
    local extra = KEYS[k + n]
    if held then
        for i = k, k + n - 1 do
            redis.call("PEXPIRE", KEYS[i], ttl)
        end
        if beside == "l" then
            outlast(extra, redis.call("PTTL", extra), ttl)
        elseif beside == "r" then
            local record = redis.call("GET", extra)
            if record and string.sub(record, 1, #token + 1) == token .. " " then
                redis.call("PEXPIRE", extra, ttl)
            end
        end
    end
    flags[#flags + 1] = held and "1" or "0"
    k = k + n
    if beside ~= "-" then
        k = k + 1
    end
end
return table.concat(flags)

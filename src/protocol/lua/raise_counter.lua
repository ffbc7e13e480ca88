local wanted = tonumber(ARGV[1])
local lowest = nil
for _, key in ipairs(KEYS) do
    local current = tonumber(redis.call("GET", key) or "0")
    if current < wanted then
        redis.call("SET", key, ARGV[1])
        current = wanted
    end
    if lowest == nil or current < lowest then
        lowest = current
    end
end
return lowest

-- Keeps the holder list `list` alive for at least `ttl` ms, the TTL just given to an entry
-- it names, so that it outlives every live entry it names: its expiry only ever rises.
-- `left` is the list's PTTL before the entry was listed (-2: the list is new). A list
-- without expiry (-1: made by an earlier version, whose clients extend their entries
-- without touching it) keeps none.
local function outlast(list, left, ttl)
    if left == -2 or (left >= 0 and left < ttl) then
        redis.call("PEXPIRE", list, ttl)
    end
end

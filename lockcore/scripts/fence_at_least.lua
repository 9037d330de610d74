-- Raise a fencing counter to at least a floor; never lower it.
-- KEYS[1]  lock:{name}:fence   the fencing counter (the next token is one INCR above it)
-- ARGV[1]  issued              the highest token already handed out, which a Redis
--                              restarted without persistence no longer remembers
-- returns  the counter after the call (>= issued)
local current = tonumber(redis.call('get', KEYS[1]) or '0')
local issued = tonumber(ARGV[1])
if current < issued then
    redis.call('set', KEYS[1], ARGV[1])
    return issued
end
return current

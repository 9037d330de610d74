-- Take every resource of a multi lock, or none of them (seed 003's batch lock).
-- KEYS[1..n]     lock:{tag}:r:<resource> one key per resource, all with the same hash tag
-- KEYS[n+1..2n]  lock:{tag}:s:<resource> their wake-up lists (BLPOP)
-- KEYS[2n+1]     lock:{tag}:fence        the fencing counter; release never deletes it
-- ARGV[1]        token                   fresh random value of this acquisition
-- ARGV[2]        ttl_ms                  expiry of every resource key
-- ARGV[3]        woken_for               i if a wake-up of resource i woke us (notify), else 0
-- ARGV[4]        signal_ttl_ms           how long a passed-on wake-up survives unheard
-- returns  {1, fencing_token, 0}         all taken; the token is greater than any before
--          {0, i, pttl}                  KEYS[i] is held by someone else (pttl: its ms left);
--                                        no resource was written
-- Check everything before writing anything: a script is atomic, so no other client
-- can slip in between the check and the SETs, and no partial hold is ever left.
local n = (#KEYS - 1) / 2
for i = 1, n do
    if redis.call('exists', KEYS[i]) == 1 then
        -- Woken by resource w's release, free now, and stopped by another one: the
        -- wake-up we took was w's only one, so pass it on to the next waiter of w (a
        -- waiter of w alone slept until its block ran out, up to a second).
        local w = tonumber(ARGV[3])
        if w > 0 and w ~= i and redis.call('exists', KEYS[w]) == 0 then
            local signal = KEYS[n + w]
            redis.call('del', signal)
            redis.call('rpush', signal, 1)
            redis.call('pexpire', signal, ARGV[4])
        end
        return {0, i, redis.call('pttl', KEYS[i])}
    end
end
for i = 1, n do
    redis.call('set', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return {1, redis.call('incr', KEYS[#KEYS]), 0}

-- Take every resource of a multi lock, or none of them (seed 003's batch lock).
-- KEYS[1..n]  lock:{tag}:r:<resource> one key per resource, all with the same hash tag
-- KEYS[n+1]   lock:{tag}:fence        the fencing counter; release never deletes it
-- ARGV[1]     token                   fresh random value of this acquisition
-- ARGV[2]     ttl_ms                  expiry of every resource key
-- returns  {1, fencing_token, 0}      all taken; the token is greater than any before
--          {0, i, pttl}               KEYS[i] is held by someone else (pttl: its ms left);
--                                     nothing was written
-- Check everything before writing anything: a script is atomic, so no other client
-- can slip in between the check and the SETs, and no partial hold is ever left.
local n = #KEYS - 1
for i = 1, n do
    if redis.call('exists', KEYS[i]) == 1 then
        return {0, i, redis.call('pttl', KEYS[i])}
    end
end
for i = 1, n do
    redis.call('set', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return {1, redis.call('incr', KEYS[n + 1]), 0}

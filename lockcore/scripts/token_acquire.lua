-- Take a token lock and issue its fencing token, atomically.
-- KEYS[1]  lock:{name}         the lock; its value is the holder's random token
-- KEYS[2]  lock:{name}:fence   the fencing counter; release never deletes it
-- ARGV[1]  token               fresh random value of this acquisition
-- ARGV[2]  ttl_ms              lock expiry in milliseconds
-- returns  {1, fencing_token}  acquired; the token is strictly greater than any before
--          {0, pttl}           held by someone else; pttl is its remaining ms (-1: none)
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return {1, redis.call('incr', KEYS[2])}
end
return {0, redis.call('pttl', KEYS[1])}

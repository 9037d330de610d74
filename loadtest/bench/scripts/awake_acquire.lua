-- Experiment "x-awake": token_acquire.lua, and a woken waiter clears the "awake" mark.
-- KEYS[1]  lock:{name}
-- KEYS[2]  lock:{name}:fence
-- KEYS[3]  lock:{name}:awake    set by a release that woke a waiter
-- ARGV[1]  token
-- ARGV[2]  ttl_ms
-- ARGV[3]  "1" when this caller was just woken (it popped the signal)
-- returns  {1, fencing_token} or {0, pttl}, as token_acquire.lua
if ARGV[3] == '1' then
    redis.call('del', KEYS[3])
end
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return {1, redis.call('incr', KEYS[2])}
end
return {0, redis.call('pttl', KEYS[1])}

-- Release a token lock only if we still hold it, and wake one waiter.
-- KEYS[1]  lock:{name}
-- KEYS[2]  lock:{name}:signal   list a notify-waiter blocks on with BLPOP
-- ARGV[1]  token                the value we set when acquiring
-- ARGV[2]  signal_ttl_ms        how long the wake-up survives with nobody waiting
-- ARGV[3]  waker (optional)     the wake-up's value: who released (default 1)
-- returns  1  released
--          2  released, and the previous wake-up had been taken: others are waiting
--          0  not ours any more (expired, or taken by another holder): nothing done
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
redis.call('del', KEYS[1])
local unclaimed = redis.call('del', KEYS[2])  -- 1: nobody BLPOPed since the last release
redis.call('rpush', KEYS[2], ARGV[3] or 1)
redis.call('pexpire', KEYS[2], ARGV[2])
return 2 - unclaimed

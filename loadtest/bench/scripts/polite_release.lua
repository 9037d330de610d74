-- Experiment "x-polite": token_release.lua that also says whether anyone was waiting.
-- KEYS[1]  lock:{name}
-- KEYS[2]  lock:{name}:signal    list the waiters BLPOP on
-- KEYS[3]  lock:{name}:waiting   set by each waiter just before it blocks (expires)
-- ARGV[1]  token
-- ARGV[2]  signal_ttl_ms
-- returns  0  not ours: nothing done
--          1  released, nobody was waiting
--          2  released and a waiter woken: the releaser should queue, not barge
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
redis.call('del', KEYS[1])
redis.call('del', KEYS[2])
redis.call('rpush', KEYS[2], 1)
redis.call('pexpire', KEYS[2], ARGV[2])
if redis.call('exists', KEYS[3]) == 1 then
    return 2
end
return 1

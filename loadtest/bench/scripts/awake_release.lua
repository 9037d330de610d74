-- Experiment "x-awake": wake a waiter only if none is awake already; hand off to a
-- starving one (Go's sync.Mutex: barging for throughput, hand-off against starvation).
-- KEYS[1]  lock:{name}
-- KEYS[2]  lock:{name}:signal    list the waiters BLPOP on
-- KEYS[3]  lock:{name}:awake     a woken waiter has not tried yet (expires: ARGV[3])
-- KEYS[4]  lock:{name}:starving  a woken waiter lost the race to a barging releaser
-- KEYS[5]  lock:{name}:starve    list only starving waiters (and yielders) BLPOP on
-- ARGV[1]  token
-- ARGV[2]  signal_ttl_ms
-- ARGV[3]  awake_ms
-- returns  0  not ours: nothing done
--          1  released
--          2  released and handed to a starving waiter: the releaser must not barge
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
redis.call('del', KEYS[1])
local list, code = KEYS[2], 1
if redis.call('del', KEYS[4]) == 1 then
    list, code = KEYS[5], 2
elseif redis.call('exists', KEYS[3]) == 1 then
    return 1
end
redis.call('del', list)
redis.call('rpush', list, 1)
redis.call('pexpire', list, ARGV[2])
redis.call('set', KEYS[3], 1, 'PX', ARGV[3])
return code

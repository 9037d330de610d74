-- Wake exactly one waiter blocked in BLPOP on a lock's signal list.
-- KEYS[1]  lock:{name}:signal
-- ARGV[1]  how long the signal survives with nobody waiting (ms)
-- returns  1
-- DEL first: at most one element ever waits, so a burst of releases with no
-- waiters cannot build up a backlog of stale wake-ups.
redis.call('del', KEYS[1])
redis.call('rpush', KEYS[1], 1)
redis.call('pexpire', KEYS[1], ARGV[1])
return 1

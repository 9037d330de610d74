-- A FIFO lock with direct hand-off: seed 001's ZooKeeper queue, done on Redis.
-- KEYS[1]  lock:{name}            the holder; value = uuid of the acquisition holding it
-- KEYS[2]  lock:{name}:queue      ZSET uuid -> ticket (arrival order)
-- KEYS[3]  lock:{name}:leases     ZSET uuid -> lease expiry (ms, Redis's clock)
-- KEYS[4]  lock:{name}:lease_ms   HASH uuid -> the lease length that waiter asked for
-- KEYS[5]  lock:{name}:seq        ticket counter
-- KEYS[6]  lock:{name}:fence      fencing counter; bumped at every grant, never deleted
-- KEYS[7]  lock:{name}:wake:      prefix of the per-waiter wake lists (same hash tag)
-- ARGV[1]  op        'acquire' or 'release'
-- ARGV[2]  uuid      identifies one acquisition across all its attempts
-- ARGV[3]  ttl_ms    the lock's TTL once claimed
-- ARGV[4]  lease_ms  how long this waiter stays queued without calling again
-- ARGV[5]  ring      optional '1': on success, leave one element on our own wake list,
--                    so a BLPOP pipelined behind this call returns at once
-- acquire returns {1, fencing_token}          we hold the lock
--                 {0, holder_pttl, position}  queued (position 0 = next in line)
-- release returns 1  released; nobody was waiting
--                 3  released and handed to the next live waiter
--                 2  we were only queued (giving up): we left the queue
--                 0  neither holder nor queued: nothing done
local op, uuid = ARGV[1], ARGV[2]

-- Redis's clock in ms; read only when a lease matters (a release with nobody queued,
-- the uncontended case, needs none), and before the script's first write: a TIME the
-- user may not run (an ACL without @fast) failed after the release's DEL, and Redis
-- keeps a script's writes up to its error: the lock was freed and release() raised
-- (a lockcore audit).
local function now_ms()
    local clock = redis.call('time')
    return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end

local function forget(id)
    redis.call('zrem', KEYS[2], id)
    redis.call('zrem', KEYS[3], id)
    redis.call('hdel', KEYS[4], id)
end

-- Hand the free lock to the oldest waiter whose lease is still running. It gets only a
-- claim window (its lease) to take it up, so a waiter that died cannot hold it for a ttl.
local function grant_next(now)
    if redis.call('exists', KEYS[2]) == 0 then  -- nobody queued (leases go with the queue)
        return nil
    end
    for _, dead in ipairs(redis.call('zrangebyscore', KEYS[3], '-inf', now)) do
        forget(dead)
        redis.call('del', KEYS[7] .. dead)
    end
    local head = redis.call('zrange', KEYS[2], 0, 0)[1]
    if not head then
        return nil
    end
    local window = redis.call('hget', KEYS[4], head)
    forget(head)
    redis.call('set', KEYS[1], head, 'PX', window)
    redis.call('incr', KEYS[6])
    local wake = KEYS[7] .. head
    redis.call('del', wake)
    redis.call('rpush', wake, 1)  -- wake exactly this waiter: no thundering herd
    redis.call('pexpire', wake, window)
    return head
end

-- Ours now: stretch the claim window to the full ttl, and settle our wake list.
local function claimed()
    redis.call('pexpire', KEYS[1], ARGV[3])
    local wake = KEYS[7] .. uuid
    redis.call('del', wake)
    if ARGV[5] == '1' then
        redis.call('rpush', wake, 1)
        redis.call('pexpire', wake, ARGV[4])
    end
    return {1, tonumber(redis.call('get', KEYS[6]))}
end

if op == 'release' then
    if redis.call('get', KEYS[1]) == uuid then
        local now = redis.call('exists', KEYS[2]) == 1 and now_ms() or 0  -- (0: unused)
        redis.call('del', KEYS[1])
        if grant_next(now) then
            return 3
        end
        return 1
    end
    if redis.call('zscore', KEYS[2], uuid) then
        forget(uuid)
        redis.call('del', KEYS[7] .. uuid)
        return 2
    end
    return 0
end

-- op == 'acquire'
if redis.call('get', KEYS[1]) == uuid then  -- handed to us (or our reply was lost)
    return claimed()
end
local now = now_ms()
-- Join the queue once: a retry after a lost reply finds its ticket (seed 001's ghost).
if not redis.call('zscore', KEYS[2], uuid) then
    redis.call('zadd', KEYS[2], redis.call('incr', KEYS[5]), uuid)
end
redis.call('zadd', KEYS[3], now + tonumber(ARGV[4]), uuid)
redis.call('hset', KEYS[4], uuid, ARGV[4])
if redis.call('exists', KEYS[1]) == 0 and grant_next(now) == uuid then
    return claimed()
end
return {0, redis.call('pttl', KEYS[1]), redis.call('zrank', KEYS[2], uuid)}

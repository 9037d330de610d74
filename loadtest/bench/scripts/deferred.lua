-- x-deferred: token's bounded barging with the waiter's bound kept inside Redis.
-- A failed try queues the waiter at once, due `bound_ms` later (Redis's clock); until a
-- waiter is due, a running acquirer may take a free lock (barge). A release with a due
-- waiter at the head hands the lock to it and wakes only it, so a waiter blocks in one
-- BLPOP from its failure to its turn: no client-side timer, no separate join.
-- Its release and queue bookkeeping copy lockcore's fair.lua (the queue scored by due
-- time instead of a ticket): a prototype, kept beside the figures it produced.
-- KEYS[1] lock  KEYS[2] queue (ZSET uuid -> due ms)  KEYS[3] leases (ZSET uuid -> expiry)
-- KEYS[4] fence  KEYS[5] wake-list prefix
-- ARGV: op ('acquire'|'release'), uuid, ttl_ms, lease_ms, bound_ms, ring ('1': on
--       success leave an element on our own wake list for a BLPOP behind this call)
-- acquire -> {1, fence} held | {0, pttl} queued;  release -> 1 | 3 handed on | 2 left | 0
local op, uuid = ARGV[1], ARGV[2]

local function now_ms()
    local clock = redis.call('time')
    return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end

local function forget(id)
    redis.call('zrem', KEYS[2], id)
    redis.call('zrem', KEYS[3], id)
end

-- the head of the queue if it is due, else nil. Waiters whose lease ran out are pruned
-- only when the head is due (the barging path stays at one ZRANGE and one TIME).
local function due_head()
    local head = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
    if not head[1] then
        return nil
    end
    local now = now_ms()
    if tonumber(head[2]) > now then
        return nil
    end
    for _, dead in ipairs(redis.call('zrangebyscore', KEYS[3], '-inf', now)) do
        forget(dead)
        redis.call('del', KEYS[5] .. dead)
    end
    head = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
    if head[1] and tonumber(head[2]) <= now then
        return head[1]
    end
    return nil
end

local function grant(head)
    forget(head)
    redis.call('set', KEYS[1], head, 'PX', ARGV[4])  -- a claim window: one lease
    redis.call('incr', KEYS[4])
    local wake = KEYS[5] .. head
    redis.call('del', wake)
    redis.call('rpush', wake, 1)
    redis.call('pexpire', wake, ARGV[4])
end

local function claimed(fence)
    forget(uuid)
    local wake = KEYS[5] .. uuid
    if ARGV[6] == '1' then
        redis.call('del', wake)
        redis.call('rpush', wake, 1)
        redis.call('pexpire', wake, ARGV[4])
    end
    if fence then  -- taken free: SET already gave it the ttl, and no hand-off woke us
        return {1, fence}
    end
    redis.call('pexpire', KEYS[1], ARGV[3])
    if ARGV[6] ~= '1' then
        redis.call('del', wake)
    end
    return {1, tonumber(redis.call('get', KEYS[4]))}
end

if op == 'release' then
    if redis.call('get', KEYS[1]) == uuid then
        redis.call('del', KEYS[1])
        local head = due_head()
        if head then
            grant(head)
            return 3
        end
        return 1
    end
    if redis.call('zscore', KEYS[2], uuid) then
        forget(uuid)
        redis.call('del', KEYS[5] .. uuid)
        return 2
    end
    return 0
end

local holder = redis.call('get', KEYS[1])
if holder == uuid then
    return claimed()
end
if not holder then
    local head = due_head()
    if head then
        grant(head)  -- a due waiter goes first, even before us
        if head == uuid then
            return claimed()
        end
    else
        redis.call('set', KEYS[1], uuid, 'PX', ARGV[3])
        return claimed(redis.call('incr', KEYS[4]))
    end
end
if not redis.call('zscore', KEYS[2], uuid) then
    redis.call('zadd', KEYS[2], now_ms() + tonumber(ARGV[5]), uuid)
end
redis.call('zadd', KEYS[3], now_ms() + tonumber(ARGV[4]), uuid)
return {0, redis.call('pttl', KEYS[1])}

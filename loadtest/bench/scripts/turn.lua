-- PROTOTYPE (bench --experimental, x-turn<N>): lockcore's fair.lua plus turns.
-- Not a script of its own: experiments.turn_script() inserts each section below into
-- fair.lua's text, before the line its "--@before:" header names (exactly once there),
-- so the queue, the leases and the hand-off stay fair.lua's own.
-- KEYS[8]  lock:{name}:turn   when the current holder's turn ends (us, Redis's clock)
-- ARGV[6]  turn_ms           how long a holder may re-take a lock others queue for
-- op 'try': SET NX, allowed while nobody is queued or the turn lasts.
-- release returns 4: released within the turn, others queued but not handed on.

--@before: local function forget(id)
local turn_us = math.floor(tonumber(ARGV[6] or 0) * 1000)

local function now_us()
    local clock = redis.call('time')
    return tonumber(clock[1]) * 1000000 + tonumber(clock[2])
end

local function start_turn()
    redis.call('set', KEYS[8], now_us() + turn_us, 'PX', 1000 + math.floor(turn_us / 1000))
end

local function turn_over()
    local ends = redis.call('get', KEYS[8])
    return not ends or now_us() >= tonumber(ends)
end

--@before:     return head
    start_turn()  -- every grant starts the new holder's turn

--@before: if op == 'release' then
if op == 'try' then
    if redis.call('exists', KEYS[2]) == 1 and turn_over() then
        if redis.call('exists', KEYS[1]) == 0 then
            grant_next(now_ms())  -- free at the turn's end: the head's, wake it
        end
        return {0, redis.call('pttl', KEYS[1])}
    end
    if redis.call('set', KEYS[1], uuid, 'NX', 'PX', ARGV[3]) then
        return {1, redis.call('incr', KEYS[6])}
    end
    return {0, redis.call('pttl', KEYS[1])}
end

--@before:         if grant_next(now) then
        if redis.call('exists', KEYS[2]) == 1 and not turn_over() then
            return 4  -- within the turn: freed, not handed on
        end

--@before:     redis.call('zadd', KEYS[2], redis.call('incr', KEYS[5]), uuid)
    if redis.call('exists', KEYS[2]) == 0 and turn_over() then  -- the holder's turn starts
        start_turn()
    end

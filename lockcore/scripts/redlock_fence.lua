-- RedLock's second round: raise one node's fencing counter to the token just issued.
-- KEYS[1]  lock:{name}         the lock on this node
-- KEYS[2]  lock:{name}:fence   this node's fencing counter
-- ARGV[1]  token               our random value: we only raise where we still hold
-- ARGV[2]  fencing_token       the max counter seen across the majority
-- returns  1  raised (or already at least that high) on a node we hold
--          0  not ours here any more: nothing done
-- Any later majority overlaps ours in at least one node, whose counter is now >= our
-- token, so the next INCR there (and so the next token) is strictly greater.
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
local current = tonumber(redis.call('get', KEYS[2]) or '0')
if current < tonumber(ARGV[2]) then
    redis.call('set', KEYS[2], ARGV[2])
end
return 1

-- Replace the TTL of a token lock, owner only.
-- KEYS[1]  lock:{name}
-- ARGV[1]  token      the value we set when acquiring
-- ARGV[2]  ttl_ms     the new TTL (replaces, does not add)
-- returns  1  extended
--          0  not ours any more: nothing done
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
redis.call('pexpire', KEYS[1], ARGV[2])
return 1

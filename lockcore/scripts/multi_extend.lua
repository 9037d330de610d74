-- Replace the TTL of every resource of a multi lock, only if we still hold them all.
-- KEYS[1..n]  lock:{tag}:r:<resource>
-- ARGV[1]     token      the value we set when acquiring
-- ARGV[2]     ttl_ms     the new TTL (replaces, does not add)
-- returns  1  all extended
--          0  at least one is not ours any more: nothing done
for i = 1, #KEYS do
    if redis.call('get', KEYS[i]) ~= ARGV[1] then
        return 0
    end
end
for i = 1, #KEYS do
    redis.call('pexpire', KEYS[i], ARGV[2])
end
return 1

-- Free the resources of a multi lock that this acquisition still holds.
-- KEYS[1..n]     lock:{tag}:r:<resource>        the resource keys
-- KEYS[n+1..2n]  lock:{tag}:s:<resource>        their notify lists (BLPOP wake-ups)
-- ARGV[1]        token                          the value we set when acquiring
-- ARGV[2]        signal_ttl_ms                  how long a wake-up survives unheard
-- returns  how many resources were freed; fewer than n means some had expired or
--          been taken by another holder, and those were left alone
local n = #KEYS / 2
local freed = 0
for i = 1, n do
    if redis.call('get', KEYS[i]) == ARGV[1] then
        redis.call('del', KEYS[i])
        freed = freed + 1
        local signal = KEYS[n + i]
        redis.call('del', signal)
        redis.call('rpush', signal, 1)
        redis.call('pexpire', signal, ARGV[2])
    end
end
return freed

-- Write a value only if its fencing token is not older than any seen for the key.
-- KEYS[1]  the data key being protected
-- KEYS[2]  <data key>:fence, the highest fencing token ever accepted for it
-- ARGV[1]  fencing_token   the writer's token (an integer from the lock)
-- ARGV[2]  value           what to store in KEYS[1]
-- returns  {1, fencing_token}  written; the token is now the highest seen
--          {0, highest_seen}   refused: a newer holder has written already
-- Equal tokens are accepted: one holder may write several times in its section.
local token = tonumber(ARGV[1])
local highest = tonumber(redis.call('get', KEYS[2]))
if highest ~= nil and token < highest then
    return {0, highest}
end
redis.call('set', KEYS[2], token)
redis.call('set', KEYS[1], ARGV[2])
return {1, token}

-- history_seen: record the replication history the shop has checked its sales under
-- (webapp/redishistory.py), only if no other process recorded another meanwhile.
--
-- A worker that found Redis's history changed records it *after* it has dropped every
-- stale sale copy. Recorded first (SET ... GET), a drop that failed midway, or a lost
-- reply to the SET, left the new history recorded with the stale copies still in
-- Redis, and no one looked again: a review sold 7 of 7 units twice.
--
-- KEYS[1]  seckill:redis-history   the history last checked under
-- ARGV[1]  the value the worker read before its drop ('' : none)
-- ARGV[2]  the history it checked the sales under
--
-- Returns 1 if recorded, 0 if the key had moved on (another worker's: it stands).
local current = redis.call('GET', KEYS[1])
if (current or '') ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2])
return 1

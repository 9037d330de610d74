-- forget_stale_copy: drop a sale's hash copy if it is still of the given generation.
--
-- A purchase's order row was refused: the database is in a newer sale than the copy it
-- read from Redis (a reset whose Redis side failed left the copy stale). The next
-- buyer reloads the sale once the copy is gone. Read and deleted in two steps, a reset
-- that wrote its new copy between them lost it too.
--
-- A Redis whose data has a new history (a failover: webapp/redishistory.py) drops the
-- stock key with the copy, for a path whose reload keeps a stock it finds (a lock
-- path's `SET NX`): the reload then writes the database's count, not the old one.
--
-- KEYS[1]  sale:{sku}:info   the hash copy
-- KEYS[2..] keys that go with it (none but for the above)
-- ARGV[1]  generation        the stale one the caller read
--
-- Returns 1 if the copy was dropped, 0 if it is another generation's (or gone).
if redis.call('HGET', KEYS[1], 'generation') == ARGV[1] then
  for i = 1, #KEYS do
    redis.call('DEL', KEYS[i])
  end
  return 1
end
return 0

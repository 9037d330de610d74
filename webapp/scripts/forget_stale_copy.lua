-- forget_stale_copy: drop a sale's hash copy if it is still of the given generation.
--
-- A purchase's order row was refused: the database is in a newer sale than the copy it
-- read from Redis (a reset whose Redis side failed left the copy stale). The next
-- buyer reloads the sale once the copy is gone. Read and deleted in two steps, a reset
-- that wrote its new copy between them lost it too.
--
-- KEYS[1]  sale:{sku}:info   the hash copy
-- ARGV[1]  generation        the stale one the caller read
--
-- Returns 1 if the copy was dropped, 0 if it is another generation's (or gone).
if redis.call('HGET', KEYS[1], 'generation') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0

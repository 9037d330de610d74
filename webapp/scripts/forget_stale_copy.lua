-- forget_stale_copy: drop a sale's hash copy if it is still of the given generation.
--
-- A purchase's order row was refused: the database is in a newer sale than the copy it
-- read from Redis (a reset whose Redis side failed left the copy stale). The next
-- buyer reloads the sale once the copy is gone. Read and deleted in two steps, a reset
-- that wrote its new copy between them lost it too.
--
-- Not while a reset is between its database side and its Redis side: that one writes
-- the copy over in a moment. Dropped then, the next buyer reloaded the sale as if Redis
-- had lost it: a new generation, "Redis lost the sale" in the log, and for a lock
-- strategy a hold-off of one lock TTL (an HTTP audit: 12 resets amid 60 buyers, 4 of 8
-- runs).
--
-- KEYS[1]  sale:{sku}:info              the hash copy
-- KEYS[2]  sale:{sku}:reset_in_flight   set by a reset from its database side on
-- ARGV[1]  generation                   the stale one the caller read
--
-- Returns 1 if the copy was dropped, 0 if it is another generation's (or gone), or a
-- reset is in flight.
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
if redis.call('HGET', KEYS[1], 'generation') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0

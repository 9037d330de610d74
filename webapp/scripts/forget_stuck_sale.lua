-- forget_stuck_sale: drop a sale's Redis copy, its sold-out flag and (single-key
-- paths) its stock, if the copy is still of the given generation; the next buyer
-- reloads the sale from the database (webapp/checkoutwatch.py).
--
-- Units a killed purchase took sit "in checkout" for good: Redis below the database.
-- The copy alone was not enough (a review): a sale the crash sold out had its flag
-- set, buyers were answered 409 from it before any looked for the copy, and a lock
-- path's reload kept the stale stock (its SET NX found the key). With all three gone
-- the reload writes the database's count: an `atomic` reload as a new generation, a
-- lock path's with a hold-off of one lock TTL before its first section counts again.
--
-- KEYS[1]  sale:{sku}:info     the hash copy
-- KEYS[2]  sale:{sku}:soldout  the sold-out flag
-- KEYS[3]  sale:{sku}:stock    optional: the stock (not a sharded sale's: the reload's
--                              new generation replaces its shards)
-- ARGV[1]  generation          the copy's, as the caller read it
--
-- Returns 1 if dropped, 0 if the copy is another generation's (or gone).
if redis.call('HGET', KEYS[1], 'generation') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
if KEYS[3] then
  redis.call('DEL', KEYS[3])
end
return 1

-- give_back_once: return a settled purchase's units to their stock, once, and only to
-- the stock they were taken from.
--
-- An order write whose outcome was unknown (its COMMIT's reply lost) is settled later
-- (orders.IN_DOUBT): if the database has no row, its units go back. The settling is
-- tried again until it succeeds, and a give-back whose own reply is lost would give the
-- units back twice; so the give-back leaves a marker for the purchase, beside the stock
-- (same hash slot), and a second try finds it and does nothing.
--
-- A lock path's units go back this way too when its lock ran out before its row failed
-- (orders.give_back_under_lock), seconds later. Meanwhile Redis may have lost the sale
-- and a buyer reloaded it from the database, which counts those units (no row holds
-- them). A lock path's reload keeps the sale's generation, so the generation does not
-- tell that stock from the one the units left; the copy's load does. Every copy of the
-- sale, a reset's or a reload's, carries a new one (saleinfo.sale_fields), and so does
-- every later count of the stock from the database (the first lock section after a
-- reload reads it again: section.py, reread_stock.lua); the lock section read the load
-- with the stock::
--
--   ann:    holds the lock: reads 10, sets 9; her row's write waits for the database
--   redis:  restarts empty: the stock, the sale, ann's lock are gone
--   ann:    her write fails; her lock is gone: her unit goes back later
--   bob:    reloads the sale (the database: 10 left), reads 10, sets 9, writes his row
--   settle: gives ann's unit back: Redis 10, the database 9, one unit sold twice
--   fixed:  the copy's load is not the one ann read: nothing given back (-2)
--
-- A copy gone (lost, not reloaded yet) has no load: -2 too, the reload to come counts
-- the units. A copy written before loads existed has none either: its sections read
-- '-', which matches it until a reload or a count writes one, and matches a copy gone
-- as well: those units go back, and the count that follows the reload overwrites them.
--
-- KEYS[1]  the stock key (sale:{sku}:stock, or a shard's)
-- KEYS[2]  its generation key (sale:{sku}:stockgen, or the shard's)
-- KEYS[3]  the marker: <stock key>:settled:<the purchase's nonce>
-- KEYS[4]  the sale's hash copy (sale:{sku}:info); only with ARGV[4]
-- ARGV[1]  quantity
-- ARGV[2]  generation the units were taken from ('': do not check)
-- ARGV[3]  how long the marker lives, ms
-- ARGV[4]  the load the units were taken from ('-': the copy had none, and a copy
--          gone counts as none; '' or missing: do not check)
--
-- Returns 1 if the units went back, 0 if they had before, -1 if the sale was reset
-- since (they were the old sale's: nothing to return), -2 if the stock was counted
-- again from the database since, or will be (the copy is another load's, or gone and
-- the units had a load).
if redis.call('SET', KEYS[3], '1', 'NX', 'PX', ARGV[3]) == false then
  return 0
end
if ARGV[2] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[2] then
  return -1
end
if ARGV[4] and ARGV[4] ~= '' and (redis.call('HGET', KEYS[4], 'load') or '-') ~= ARGV[4] then
  return -2
end
redis.call('INCRBY', KEYS[1], ARGV[1])
return 1

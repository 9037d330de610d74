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
-- them). A lock path's reload keeps the sale's generation and marks the sale for a
-- count; the first lock section after it counts the stock from the database as a new
-- generation (section.py, reread_stock.lua), and only then sells. So the generation
-- refuses these units once the count is written, and a give-back before it goes into
-- a stock the count then overwrites::
--
--   ann:    holds the lock: reads 10, sets 9; her row's write waits for the database
--   redis:  restarts empty: the stock, the sale, ann's lock are gone
--   ann:    her write fails; her lock is gone: her unit goes back later
--   bob:    reloads the sale (the database: 10 left); after the hold-off his section
--           counts 10 as generation g1, sets 9, writes his row
--   settle: ann's unit is g0's: nothing given back (-1). Redis 9, the database 9
--
-- A stock key that is gone (evicted alone, its generation kept) is not made again out
-- of these units alone: the next section would sell them as the whole sale and flag
-- it sold out, the database's other units stranded. Nothing goes back (-2); the next
-- buyer finds the key lost and the sale is reloaded, its units counted (a shard's
-- too: sharded_take.lua answers 'lost').
--
-- KEYS[1]  the stock key (sale:{sku}:stock, or a shard's)
-- KEYS[2]  its generation key (sale:{sku}:stockgen, or the shard's)
-- KEYS[3]  the marker: <stock key>:settled:<the purchase's nonce>
-- ARGV[1]  quantity
-- ARGV[2]  generation the units were taken from ('': do not check)
-- ARGV[3]  how long the marker lives, ms
--
-- Returns 1 if the units went back, 0 if they had before, -1 if the sale was reset
-- or counted again since (they were the old generation's: nothing to return), -2 if
-- the stock key is gone (the reload to come counts them).
if redis.call('SET', KEYS[3], '1', 'NX', 'PX', ARGV[3]) == false then
  return 0
end
if ARGV[2] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[2] then
  return -1
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -2
end
redis.call('INCRBY', KEYS[1], ARGV[1])
return 1

-- give_back_once: return a settled purchase's units to their stock, once.
--
-- An order write whose outcome was unknown (its COMMIT's reply lost) is settled later
-- (orders.IN_DOUBT): if the database has no row, its units go back. The settling is
-- tried again until it succeeds, and a give-back whose own reply is lost would give the
-- units back twice; so the give-back leaves a marker for the purchase, beside the stock
-- (same hash slot), and a second try finds it and does nothing.
--
-- KEYS[1]  the stock key (sale:{sku}:stock, or a shard's)
-- KEYS[2]  its generation key (sale:{sku}:stockgen, or the shard's)
-- KEYS[3]  the marker: <stock key>:settled:<the purchase's nonce>
-- ARGV[1]  quantity
-- ARGV[2]  generation the units were taken from ('': do not check)
-- ARGV[3]  how long the marker lives, ms
--
-- Returns 1 if the units went back, 0 if they had before, -1 if the sale was reset
-- since (they were the old sale's: nothing to return).
if redis.call('SET', KEYS[3], '1', 'NX', 'PX', ARGV[3]) == false then
  return 0
end
if ARGV[2] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[2] then
  return -1
end
redis.call('INCRBY', KEYS[1], ARGV[1])
return 1

-- flag_soldout: set a sale's sold-out flag, unless the sale was reset meanwhile.
--
-- An `atomic-sharded` buyer who found every shard empty sets the flag so that late
-- buyers hear 409 in one round trip. If a reset came between the buyer's reading of
-- the shards and this call, the flag would stop the new sale for good (the reset had
-- already cleared it); so the caller sends the generation it read before the shards,
-- and the flag is set only while that generation is still the sale's.
--
-- A lock section's (section.py, flag_sold_out) sends its stock key too: a combined
-- batch sets the flag after its rows, and a failed row's give-back may have found the
-- key gone (evicted alone: give_back.lua gives nothing, the reload is to count those
-- units). Flagged then, every buyer heard 409 before reaching the section that finds
-- the key lost and reloads the sale: stuck, with units in the database (a review).
--
-- KEYS[1]  sale:{sku}:soldout    the flag
-- KEYS[2]  sale:{sku}:stockgen   the sale's generation, written by every reset
-- KEYS[3]  sale:{sku}:stock      optional: the flag only while it is there
-- ARGV[1]  generation            as the caller read it before reading the shards
--
-- Returns 1 if the flag was set, 0 if the sale changed meanwhile (or its stock is gone).
if KEYS[3] and redis.call('EXISTS', KEYS[3]) == 0 then
  return 0
end
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('SET', KEYS[1], '1')
  return 1
end
return 0

-- flag_soldout: set a sale's sold-out flag, unless the sale was reset meanwhile.
--
-- An `atomic-sharded` buyer who found every shard empty sets the flag so that late
-- buyers hear 409 in one round trip. If a reset came between the buyer's reading of
-- the shards and this call, the flag would stop the new sale for good (the reset had
-- already cleared it); so the caller sends the generation it read before the shards,
-- and the flag is set only while that generation is still the sale's.
--
-- KEYS[1]  sale:{sku}:soldout    the flag
-- KEYS[2]  sale:{sku}:stockgen   the sale's generation, written by every reset
-- ARGV[1]  generation            as the caller read it before reading the shards
--
-- Returns 1 if the flag was set, 0 if the sale changed meanwhile.
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('SET', KEYS[1], '1')
  return 1
end
return 0

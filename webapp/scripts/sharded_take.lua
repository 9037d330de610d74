-- sharded_take: take `quantity` units from ONE shard of a hot SKU's stock.
--
-- KEYS[1]  sale:{sku#i}:stock   the units left in shard i (integer string); its own
--                               hash tag, so the shards of one sale spread over a cluster
-- ARGV[1]  quantity             positive integer
--
-- Returns  >= 0  the units left in this shard after the purchase (it succeeded)
--          -1 - n   not enough here: the shard holds n units (n < quantity), nothing
--                   changed; the caller tries the next shard
--
-- Exactly one key, so the script runs on whichever node owns that shard: no
-- cross-slot call however the shards are spread.
local quantity = tonumber(ARGV[1])
local stock = tonumber(redis.call('GET', KEYS[1]) or '0')
if stock < quantity then
  return -1 - stock
end
return redis.call('DECRBY', KEYS[1], quantity)

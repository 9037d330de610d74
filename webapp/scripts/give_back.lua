-- give_back: return units a purchase took to the stock, if the sale is still the one
-- they were taken from.
--
-- A lock-free purchase (`atomic`) takes its units before it writes its order row; if
-- the row cannot be written, the units go back. A reset in between (orders deleted,
-- a new stock loaded) makes those units the old sale's: added to the new stock they
-- would be sold twice. Every reset writes the sale's generation next to the stock
-- (paths.py `reset_stock`), so the units go back only while it is unchanged.
--
-- A stock key that is gone (evicted alone) is not made again out of these units: it
-- would be sold as the whole sale (or a shard's whole share). The purchase that finds
-- it lost has the sale reloaded (a shard's too: sharded_take.lua answers 'lost'),
-- and the reload counts them.
--
-- KEYS[1]  sale:{sku}:stock      live units left (integer string), or a shard's
-- KEYS[2]  sale:{sku}:stockgen   the generation the stock belongs to (or the shard's)
-- ARGV[1]  quantity              positive integer
-- ARGV[2]  generation            the sale generation the units were taken from
--
-- Returns  >= 0  the units left after giving them back
--          -1    the sale was reset (or is being reset): nothing given back
--          -2    the stock key is gone: nothing given back (the reload counts them)
if redis.call('GET', KEYS[2]) ~= ARGV[2] then
  return -1
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -2
end
return redis.call('INCRBY', KEYS[1], ARGV[1])

-- reread_stock: the first lock section after a reload writes the stock it counted again
-- from the database, and names that count with a new load.
--
-- After Redis lost a sale (or a reset held the sections off), the first lock section
-- reads the units left from the database, every holder from before done (section.py,
-- _reread_stock). That count includes the units of a section whose row failed after its
-- lock ran out and which are still to go back (orders.give_back_under_lock): given
-- back on top of it they would be sold twice. They go back only into the load they
-- were taken from (give_back_once.lua), so the count writes a new one. Only into a
-- copy that is there: a load alone would make a hash copy without the sale.
--
-- KEYS[1]  sale:{sku}:stock      the units left
-- KEYS[2]  sale:{sku}:reloaded   the mark that asked for the count: deleted
-- KEYS[3]  sale:{sku}:info       the hash copy
-- ARGV[1]  the units the database counts
-- ARGV[2]  the new load
--
-- Returns 1 if the copy took the load, 0 if it is gone (the next buyer reloads it,
-- with a load of its own).
redis.call('SET', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('HSET', KEYS[3], 'load', ARGV[2])
  return 1
end
return 0

-- reread_stock: the first lock section after a reload writes the stock it counted again
-- from the database, as a new generation of the sale.
--
-- After Redis lost a sale (or a reset held the sections off), the first lock section
-- reads the units left from the database (section.py, _reread_stock). It counts them
-- as it starts a new generation there (saleinfo.new_generation), so a holder from
-- before whose row comes later still (its database stalled past the hold-off) writes
-- nothing, as after a reset: that row was not counted. The units of a section whose
-- row failed after its lock ran out, still to go back (orders.give_back_under_lock),
-- are in the count: they go back only into their own generation (give_back_once.lua),
-- which the count moves on.
--
-- Only over the generation counted from: a stock that moved on meanwhile (a reset's
-- Redis side) is not written over. The generation only into a copy that is there: a
-- field alone would make a hash copy without the sale.
--
-- KEYS[1]  sale:{sku}:stock      the units left
-- KEYS[2]  sale:{sku}:reloaded   the mark that asked for the count: deleted
-- KEYS[3]  sale:{sku}:info       the hash copy
-- KEYS[4]  sale:{sku}:stockgen   the generation the stock belongs to
-- ARGV[1]  the units the database counts
-- ARGV[2]  the generation counted from ('': none known, nothing checked or started)
-- ARGV[3]  the generation the count started
--
-- Returns 1 if written, copy included; 0 if written and the copy is gone (the next
-- buyer reloads it); -1 if the stock is not the generation counted from any more:
-- nothing written.
if ARGV[2] ~= '' then
  if redis.call('GET', KEYS[4]) ~= ARGV[2] then
    return -1
  end
  redis.call('SET', KEYS[4], ARGV[3])
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
if redis.call('EXISTS', KEYS[3]) == 1 then
  if ARGV[2] ~= '' then
    redis.call('HSET', KEYS[3], 'generation', ARGV[3])
  end
  return 1
end
return 0

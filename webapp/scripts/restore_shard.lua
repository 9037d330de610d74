-- restore_shard: put one shard of an atomic-sharded sale back after Redis lost it,
-- unless a newer generation's units stand there.
--
-- Each process that finds the sale's copy missing reloads it, and an atomic-sharded
-- reload starts a generation of its own (saleinfo.py), so two reloads carry two
-- generations: g1, then g2 read after g1 was committed. Written with SET NX, the
-- shards kept g1's units while restore_sale.lua put g2 in the sale's copy (it replaces
-- an older generation there): every take then answered 'stale', and every buyer heard
-- 503 until an admin reset, while buyers still holding g1 drained units no order would
-- ever record (an audit: 80 of 80 buyers refused, 34 units lost).
--
-- So a shard of an older generation is replaced, with its taken marks, as
-- restore_sale.lua replaces the single stock key; a shard of the same generation is
-- left as it is (its buyers took from it); a newer one is never touched.
--
-- KEYS[1]  shard:{sku#i}:stock     the shard's units
-- KEYS[2]  shard:{sku#i}:stockgen  the generation those units belong to
-- KEYS[3]  shard:{sku#i}:taken     the older generation's take marks (undo_take.lua)
-- ARGV[1]  generation             the reload's ('' : not known, units written NX only)
-- ARGV[2]  units                  this shard's share of the database's remaining
--
-- Returns 1 when the units were written, 0 when the shard was left as it stood.
if ARGV[1] == '' then
  if redis.call('SET', KEYS[1], ARGV[2], 'NX') then
    return 1
  end
  return 0
end
local current = tonumber(redis.call('GET', KEYS[2]) or '')
local wanted = tonumber(ARGV[1])
if current and current > wanted then
  return 0
end
if current and current == wanted then
  -- its units were written with it (a reset's try before this one): stand. Its stock
  -- key alone gone is Redis losing it, not units to write again: buyers took some;
  -- the next take answers 'lost' and the sale is reloaded (sharded_take.lua)
  return 0
end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2])
redis.call('DEL', KEYS[3])
return 1

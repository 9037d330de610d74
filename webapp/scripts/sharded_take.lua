-- sharded_take: take `quantity` units from ONE shard of a hot SKU's stock.
--
-- KEYS[1]  shard:{sku#i}:stock   the units left in shard i (integer string); its own
--                               hash tag, so the shards of one sale spread over a cluster
-- KEYS[2]  shard:{sku#i}:stockgen the sale generation shard i's units belong to
-- KEYS[3]  shard:{sku#i}:taken   optional: user -> the nonce of the purchase that took
-- ARGV[4]  user_id              units from this shard for them (with ARGV[5]),
-- ARGV[5]  nonce                optional: for undo_take.lua
-- ARGV[1]  quantity             positive integer
-- ARGV[2]  generation           the one the caller looked up ('': do not check)
-- ARGV[3]  deadline             optional: ms since the epoch, Redis's clock; run later,
--                               change nothing (webapp/deadlines.py)
--
-- Returns  >= 0  the units left in this shard after the purchase (it succeeded)
--          -1 - n   not enough here: the shard holds n units (n < quantity), nothing
--                   changed; the caller tries the next shard
--          'late'   past the deadline (the caller gave up on the reply): nothing changed
--          'stale'  the sale was reset since the caller looked it up (or is being
--                   reset): nothing changed, these units are the new sale's
--          'lost'   one of the shard's two keys is there without the other (evicted,
--                   or DEL'd): nothing changed; the caller has the sale reloaded
--
-- Every writer of a shard's stock and generation writes both in one script
-- (restore_shard.lua), and nothing deletes them: one without the other is Redis
-- losing a key. Read as before, a lost stock key was 0 units (once the other shards
-- were empty, 409 sold_out with units in the database, for good) and a lost
-- generation key a reset since (503 for good), in an eviction audit.
--
-- One slot (the shard's hash tag), so the script runs on whichever node owns that
-- shard: no cross-slot call however the shards are spread.
if ARGV[3] and ARGV[3] ~= '' then
  local now = redis.call('TIME')
  if tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) > tonumber(ARGV[3]) then
    return 'late'
  end
end
local held = redis.call('GET', KEYS[1])  -- false: the key is not there
if ARGV[2] ~= '' then
  local generation = redis.call('GET', KEYS[2])
  if (generation == ARGV[2] and not held) or (generation == false and held) then
    return 'lost'
  end
  if generation ~= ARGV[2] then
    return 'stale'
  end
end
local quantity = tonumber(ARGV[1])
local stock = tonumber(held or '0')
if stock < quantity then
  return -1 - stock
end
local left = redis.call('DECRBY', KEYS[1], quantity)
if ARGV[5] and ARGV[5] ~= '' then
  redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
end
return left

-- undo_lost: undo what a purchase's first script did, when its reply was lost.
--
-- A purchase reserves its buyer (atomic_checkout.lua, reserve.lua) and, in an `atomic`
-- sale, takes its units in the same script. If the connection drops after Redis ran
-- the script and before its reply came back, the purchase answers 503 "nothing was
-- bought" and never learns what it did: its buyer stayed reserved (every retry heard
-- 409 already_purchased, with no order) and an `atomic` sale's units stayed taken.
-- The script kept the purchase's nonce for the buyer; only a reservation with that
-- nonce is this purchase's to undo: another purchase of the same buyer (in flight, or
-- one that wrote its order) keeps its own, and a reset deleted them all.
--
-- KEYS[1]  sale:{sku}:buyers
-- KEYS[2]  sale:{sku}:reservations   user -> nonce
-- KEYS[3]  sale:{sku}:info           the sale's strategy
-- KEYS[4]  sale:{sku}:stock
-- KEYS[5]  sale:{sku}:soldout
-- ARGV[1]  user_id
-- ARGV[2]  nonce                     the lost purchase's
-- ARGV[3]  quantity
-- ARGV[4]  '1' if the script was atomic_checkout.lua (it takes an atomic sale's units)
--
-- A stock key that is gone (evicted alone) is not made again out of the units
-- (give_back.lua): the purchase that finds it lost reloads the sale, which counts them.
--
-- Returns 0: nothing of this purchase's to undo; 1: the reservation dropped; 2: and the
-- units given back.
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then
  return 0
end
redis.call('HDEL', KEYS[2], ARGV[1])
if redis.call('SREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if ARGV[4] == '1' and redis.call('HGET', KEYS[3], 'strategy') == 'atomic'
    and redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('INCRBY', KEYS[4], ARGV[3])
  redis.call('DEL', KEYS[5])
  return 2
end
return 1

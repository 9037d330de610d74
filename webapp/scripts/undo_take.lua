-- undo_take: give back the units a purchase's take script took, when its reply was lost.
--
-- `atomic_purchase.lua` (an `atomic` purchase with an Idempotency-Key, or of a sale
-- reloaded from the database) and `sharded_take.lua` take units after the buyer is
-- reserved. If the connection drops after Redis ran the take and before its reply
-- came back, the purchase answers 503 and drops the reservation, but never learns
-- that the units are gone: the take kept the purchase's nonce for the buyer beside the
-- stock it took from, and only that nonce gives them back, once.
--
-- A stock key that is gone (evicted alone) is not made again out of these units
-- (give_back.lua): the purchase that finds it lost reloads the sale, which counts them.
--
-- KEYS[1]  the stock key taken from (sale:{sku}:stock, or a shard's)
-- KEYS[2]  the taken marks in the same slot (sale:{sku}:taken, shard:{sku#i}:taken)
-- ARGV[1]  user_id
-- ARGV[2]  nonce                 the lost purchase's
-- ARGV[3]  quantity
--
-- Returns 1 if the units went back, 0 if the take had not run (or was undone before),
-- -2 if the stock key is gone (its mark dropped, nothing given back).
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then
  return 0
end
redis.call('HDEL', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -2
end
redis.call('INCRBY', KEYS[1], ARGV[3])
return 1

-- atomic_checkout: an `atomic` sale's whole fast path in one round trip.
--
-- The refusal checks, the per-user reservation and the decrement, which cost a
-- pipeline, an SADD and an EVALSHA (3 round trips) when done one by one. A sale of
-- another strategy gets its refusal checks and its reservation here, and its row back,
-- and takes its units the usual way (its lock, its SQL: services.py, paths.py).
--
-- KEYS[1]  sale:{sku}:soldout   flag: the sale is over (set here when the stock is 0)
-- KEYS[2]  sale:{sku}:buyers    set of users with an order or a purchase in flight
-- KEYS[3]  sale:{sku}:info      hash copy of the sale's row (saleinfo.py)
-- KEYS[4]  sale:{sku}:stock     live units left (integer string)
-- ARGV[1]  user_id
-- ARGV[2]  quantity             positive integer
--
-- Returns {code, units, info}: `info` is the HGETALL reply of KEYS[3] (absent for
-- codes -1 and -3 when the sale is over, and for -4), `units` the units left:
--    1  taken: the user is reserved and `quantity` units are gone; units = left
--    2  not an atomic sale: the user is reserved, nothing taken
--   -1  sold out (not enough units; the user is not reserved)
--   -2  quantity above the sale's per-user limit (nothing changed)
--   -3  already purchased (the user is in KEYS[2])
--   -4  no sale row in Redis (it lost its data): the caller reloads it
--
-- Redis runs a script to the end before any other command: the check of the user,
-- the check of the stock and the decrement cannot interleave with another buyer's.
local soldout = redis.call('GET', KEYS[1])
if soldout then
  if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
    return {-3, 0}
  end
  return {-1, 0}
end
local info = redis.call('HGETALL', KEYS[3])
if #info == 0 then
  return {-4, 0}
end
local strategy, limit
for i = 1, #info, 2 do
  if info[i] == 'strategy' then
    strategy = info[i + 1]
  elseif info[i] == 'per_user_limit' then
    limit = tonumber(info[i + 1])
  end
end
local quantity = tonumber(ARGV[2])
if quantity > limit then
  return {-2, 0, info}
end
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then
  return {-3, 0, info}
end
if strategy ~= 'atomic' then
  return {2, 0, info}
end
local stock = tonumber(redis.call('GET', KEYS[4]) or '0')
if stock < quantity then
  redis.call('SREM', KEYS[2], ARGV[1])
  if stock <= 0 then
    redis.call('SET', KEYS[1], '1')
  end
  return {-1, stock, info}
end
return {1, redis.call('DECRBY', KEYS[4], quantity), info}

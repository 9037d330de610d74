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
-- ARGV[3]  generation           optional: the sale generation the caller already knows
-- ARGV[4]  deadline             optional: ms since the epoch, Redis's clock; run later
--                               (the caller gave up on the reply: a 503), change nothing
-- ARGV[5]  nonce                optional: this purchase's, kept for the reserved user in
--                               KEYS[5] sale:{sku}:reservations, so that a caller whose
--                               reply was lost can undo what it did (undo_lost.lua)
--
-- Returns {code, units, info}: `info` is the HGETALL reply of KEYS[3], `units` the
-- units left. `info` is absent for codes -1 and -3 when the sale is over, for -4, and
-- when the hash's `generation` is ARGV[3]: the caller has that sale already (every
-- reset writes a new generation with the whole hash), and each purchase would
-- otherwise carry the same twelve strings back (a third of Redis's CPU a script:
-- docs/performance.md, session 10). The codes:
--    1  taken: the user is reserved and `quantity` units are gone; units = left
--    2  not an atomic sale: the user is reserved, nothing taken
--   -1  sold out (not enough units; the user is not reserved)
--   -2  quantity above the sale's per-user limit (nothing changed)
--   -3  already purchased (the user is in KEYS[2])
--   -4  no sale row in Redis (it lost its data), or an atomic sale's stock key is gone
--       while its row stayed (an evicting Redis): the row is dropped, nothing else
--       changed; the caller reloads the sale from the database
--   -5  past the deadline: nothing changed (webapp/deadlines.py)
--
-- Redis runs a script to the end before any other command: the check of the user,
-- the check of the stock and the decrement cannot interleave with another buyer's.
if ARGV[4] and ARGV[4] ~= '' then
  local now = redis.call('TIME')
  if tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) > tonumber(ARGV[4]) then
    return {-5, 0}
  end
end
local soldout = redis.call('GET', KEYS[1])
if soldout then
  if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
    return {-3, 0}
  end
  return {-1, 0}
end
local sale = redis.call('HMGET', KEYS[3], 'strategy', 'per_user_limit', 'generation')
local strategy, limit = sale[1], tonumber(sale[2])
if not strategy then
  return {-4, 0}
end
local function answer(code, units)
  if ARGV[3] and ARGV[3] ~= '' and sale[3] == ARGV[3] then
    return {code, units}
  end
  return {code, units, redis.call('HGETALL', KEYS[3])}
end
local quantity = tonumber(ARGV[2])
if quantity > limit then
  return answer(-2, 0)
end
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then
  return answer(-3, 0)
end
if ARGV[5] and ARGV[5] ~= '' then
  redis.call('HSET', KEYS[5], ARGV[1], ARGV[5])
end
if strategy ~= 'atomic' then
  return answer(2, 0)
end
local current = redis.call('GET', KEYS[4])
if not current then
  -- the row without its stock: a reset writes both in one MULTI, a reload in one script,
  -- so Redis lost the key (evicted, deleted). Read as 0 it answered "sold out" for good
  -- with units in the database; without the row, the next buyer reloads the sale
  redis.call('SREM', KEYS[2], ARGV[1])
  if ARGV[5] and ARGV[5] ~= '' then
    redis.call('HDEL', KEYS[5], ARGV[1])
  end
  redis.call('DEL', KEYS[3])
  return {-4, 0}
end
local stock = tonumber(current)
if stock < quantity then
  redis.call('SREM', KEYS[2], ARGV[1])
  if ARGV[5] and ARGV[5] ~= '' then  -- refused: kept, it piled up (a security audit)
    redis.call('HDEL', KEYS[5], ARGV[1])
  end
  if stock <= 0 then
    redis.call('SET', KEYS[1], '1')
  end
  return answer(-1, stock)
end
return answer(1, redis.call('DECRBY', KEYS[4], quantity))

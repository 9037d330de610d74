-- atomic_purchase: take `quantity` units in one step, no lock needed.
--
-- KEYS[1]  sale:{sku}:stock     live units left (integer string)
-- KEYS[2]  sale:{sku}:soldout   flag set here when the stock reaches zero
-- ARGV[1]  quantity             positive integer
-- KEYS[3]  sale:{sku}:stockgen  the sale generation the stock belongs to (every reset)
-- ARGV[2]  per-user limit       the most units one user may buy in this sale
-- ARGV[3]  generation           the one the caller looked up ('': do not check)
-- KEYS[4]  sale:{sku}:taken     optional: user -> the nonce of the purchase that took
-- ARGV[5]  user_id              units for them (with ARGV[6]), for undo_take.lua
-- ARGV[6]  nonce                optional: this purchase's
-- ARGV[4]  deadline             optional: ms since the epoch, Redis's clock; run later,
--                               change nothing (webapp/deadlines.py)
--
-- Returns {code, units}, like atomic_checkout.lua:
--          { 1, left}  taken: `left` units are left after this purchase
--          {-1, left}  not enough units (`left` of them, maybe 0): nothing changed
--          {-2, 0}     quantity above the per-user limit (nothing changed)
--          {-3, 0}     the sale was reset since the caller looked it up, or is being reset
--                      (no generation yet): nothing changed; these units are the new
--                      sale's, and the caller's row would be refused
--          {-4, 0}     no stock key while the sale was looked up in Redis: Redis lost it
--                      (evicted, deleted; a reset writes it with the row), nothing changed:
--                      the caller drops the row so that the next buyer reloads the sale
--          {-5, 0}     past the deadline (the caller gave up on the reply): nothing changed
--
-- Redis runs a script to the end before any other command, so the read, the check
-- and the decrement cannot interleave with another buyer's: no lost update.
if ARGV[4] and ARGV[4] ~= '' then
  local now = redis.call('TIME')
  if tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) > tonumber(ARGV[4]) then
    return {-5, 0}
  end
end
local quantity = tonumber(ARGV[1])
if quantity > tonumber(ARGV[2]) then
  return {-2, 0}
end
if ARGV[3] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[3] then
  return {-3, 0}
end
local current = redis.call('GET', KEYS[1])
if not current then
  return {-4, 0}
end
local stock = tonumber(current)
if stock < quantity then
  if stock <= 0 then
    redis.call('SET', KEYS[2], '1')
  end
  return {-1, math.max(stock, 0)}
end
local left = redis.call('DECRBY', KEYS[1], quantity)
if ARGV[6] and ARGV[6] ~= '' then
  redis.call('HSET', KEYS[4], ARGV[5], ARGV[6])
end
return {1, left}

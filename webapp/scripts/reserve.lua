-- reserve: the buyer's one order per sale (SADD), unless it is too late.
--
-- KEYS[1]  sale:{sku}:buyers    users with an order or a purchase in flight
-- KEYS[2]  sale:{sku}:reservations  user -> nonce (optional, with ARGV[3])
-- ARGV[1]  user_id
-- ARGV[2]  deadline             ms since the epoch, Redis's clock ('': no check)
-- ARGV[3]  nonce                optional: this purchase's (undo_lost.lua)
--
-- Returns  1   reserved
--          0   already reserved (an order, or a purchase in flight)
--          -5  past the deadline: nothing changed (webapp/deadlines.py)
if ARGV[2] ~= '' then
  local now = redis.call('TIME')
  if tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) > tonumber(ARGV[2]) then
    return -5
  end
end
local added = redis.call('SADD', KEYS[1], ARGV[1])
if added == 1 and ARGV[3] and ARGV[3] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
end
return added

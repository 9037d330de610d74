-- set_stock: the locked path's write of the stock it computed, unless it is too late.
--
-- A plain SET on purpose: the section reads the stock, computes, and writes it back,
-- so under a broken lock two buyers' writes can still overwrite each other (the lost
-- update the unsafe strategies must show). What this adds is only the deadline: a SET
-- whose reply the caller gave up on (a 503) must not land afterwards.
--
-- KEYS[1]  sale:{sku}:stock     live units left
-- ARGV[1]  units                the new stock
-- ARGV[2]  deadline             ms since the epoch, Redis's clock ('': no check)
--
-- Returns  1   written
--          -5  past the deadline: nothing written (webapp/deadlines.py)
if ARGV[2] ~= '' then
  local now = redis.call('TIME')
  if tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) > tonumber(ARGV[2]) then
    return -5
  end
end
redis.call('SET', KEYS[1], ARGV[1])
return 1

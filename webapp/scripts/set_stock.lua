-- set_stock: the locked path's write of the stock it computed, unless it is too late.
--
-- A plain SET on purpose: the section reads the stock, computes, and writes it back,
-- so under a broken lock two buyers' writes can still overwrite each other (the lost
-- update the unsafe strategies must show). What this adds is only the deadline: a SET
-- whose reply the caller gave up on (a 503) must not land afterwards.
--
-- What it also adds: the generation the section read. A section of an unsafe lock is
-- not held off by a reset (``naive`` excludes nobody, ``local`` only its own worker), so
-- its SET could land after a reset and overwrite the new sale's stock with the old
-- sale's arithmetic: a new ``token`` sale of 10 read 48 and sold 14 (an admin-reset
-- audit). The unsafe locks oversell their own sale, not the next one.
--
-- KEYS[1]  sale:{sku}:stock     live units left
-- KEYS[2]  sale:{sku}:stockgen  its generation (absent: no check)
-- ARGV[1]  units                the new stock
-- ARGV[2]  deadline             ms since the epoch, Redis's clock ('': no check)
-- ARGV[3]  generation           the one the section read ('': no check)
--
-- Returns  1   written
--          -3  the sale is another generation now (a reset, a count): nothing written
--          -5  past the deadline: nothing written (webapp/deadlines.py)
if ARGV[2] ~= '' then
  local now = redis.call('TIME')
  if tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) > tonumber(ARGV[2]) then
    return -5
  end
end
if KEYS[2] and ARGV[3] and ARGV[3] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[3] then
  return -3
end
redis.call('SET', KEYS[1], ARGV[1])
return 1

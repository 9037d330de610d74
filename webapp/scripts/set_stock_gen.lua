-- set_stock_gen: a reset's last step, done in steps (atomic-sharded): write the sale
-- generation its shards now hold, unless a newer reset's stands.
--
-- Two resets of one sale at once are ordered in the database (the sale's row lock), not
-- in Redis: the earlier one's steps may land after the later one's. Written plainly,
-- its generation went over the later one's, which the shards and the copy carried
-- (webapp/paths.py, StockPath._reset_in_steps).
--
-- KEYS[1]  sale:{sku}:stockgen  the generation the sale's stock belongs to
-- KEYS[2]  sale:{sku}:info      the hash copy, with the generation of the reset that
--                               wrote it last
-- ARGV[1]  generation           this reset's
--
-- Returns 1 when written, 0 when a newer (or this same) generation stands.
local wanted = tonumber(ARGV[1])
local copy = tonumber(redis.call('HGET', KEYS[2], 'generation') or '')
if copy and copy > wanted then
  return 0
end
local current = tonumber(redis.call('GET', KEYS[1]) or '')
if current and current >= wanted then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
return 1

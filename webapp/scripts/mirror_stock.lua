-- mirror_stock: keep Redis's copy of a `sql` sale's stock in step with the database.
--
-- The database is an `sql` sale's stock; Redis holds a copy (the storefront, the
-- sold-out flag, the audit). Each purchase, once its UPDATE is committed, reads the
-- sale's `remaining` and `started_at` and sends them here; so does a reset, after its
-- commit. A DECRBY instead would be lost when it lands between a reset's commit and the
-- reset's rewrite of Redis (a purchase committed after the reset, counted in the new
-- sale, and its decrement wiped), and would wrongly count against the new sale when it
-- comes from a purchase committed before the reset (its order deleted with the old sale).
--
-- Within one generation of the sale (one reset: its `started_at`) `remaining` only
-- goes down, and every read is made after its own commit: the smallest value read is
-- the database's, whatever order the replies arrive in. A newer generation replaces
-- the copy; an older one is ignored.
--
-- The sold-out flag follows the copy: set when the database has nothing left in the
-- current generation, cleared when a newer generation arrives. (Set from a stale
-- purchase's "sold out" after a reset had cleared it, it stopped the new sale for good.)
--
-- KEYS[1]  sale:{sku}:stock      the copy (integer string)
-- KEYS[2]  sale:{sku}:stockgen   the generation the copy belongs to (integer string)
-- A reset deletes the sale's keys with its new hash copy written, and writes the
-- stock's generation later (atomic-sharded, after its shards): in between, a missing
-- generation read as older than any, and a late write of the old sale's copy went in,
-- its sold-out flag with it. The new sale (atomic-sharded reads the flag first) then
-- answered 409 sold_out with its units on the shelf, until the next reset. So the hash
-- copy's generation counts too: a newer one there means this write is of an old sale.
--
-- KEYS[3]  sale:{sku}:soldout    the sold-out flag
-- KEYS[4]  sale:{sku}:info       the sale's hash copy, with its generation
-- ARGV[1]  remaining             read from the database after a commit
-- ARGV[2]  generation            the sale's started_at, in microseconds since the epoch
--
-- Returns the copy's value after the call.
local remaining = tonumber(ARGV[1])
local generation = tonumber(ARGV[2])
local copy = tonumber(redis.call('HGET', KEYS[4], 'generation') or '')
if copy and copy > generation then
  return tonumber(redis.call('GET', KEYS[1]) or '0')
end
local current = tonumber(redis.call('GET', KEYS[2]) or '-1')
if generation > current then
  redis.call('SET', KEYS[1], remaining)
  redis.call('SET', KEYS[2], ARGV[2])
  if remaining <= 0 then
    redis.call('SET', KEYS[3], '1')
  else
    redis.call('DEL', KEYS[3])
  end
  return remaining
end
if generation < current then
  return tonumber(redis.call('GET', KEYS[1]) or '0')
end
local stock = tonumber(redis.call('GET', KEYS[1]) or '')
if stock == nil or remaining < stock then
  redis.call('SET', KEYS[1], remaining)
  stock = remaining
end
if stock <= 0 then
  redis.call('SET', KEYS[3], '1')
end
return stock

-- restore_sale: put a sale read from the database back into Redis, unless a reset
-- wrote a newer one meanwhile.
--
-- Redis lost a sale's keys (a restart without persistence): the first buyer reads the
-- sale from the database and writes it back: the buyers, the stock, the sold-out flag,
-- the hash copy. Between that read and these writes an admin reset may commit a new
-- sale and write its keys. Written one by one, the reload then overwrote the new copy
-- with the old one (the old strategy, the old generation), and added the old sale's
-- buyers and sold-out flag to the new sale. An audit caught a sale reset to `sql` that
-- went on selling through the `token` lock, and oversold.
--
-- So all of it is one script, and it writes nothing when the hash copy is back (a reset,
-- or another process's reload, wrote it) or the stock belongs to a newer generation
-- than the one read. Every reset writes the hash copy before or with its stock
-- (paths.py), so a reset under way is seen here. A stock of an *older* generation (a
-- reset whose Redis side failed) is replaced, with what went with it.
--
-- An `atomic` sale's reload starts a generation of its own (saleinfo.py: a purchase
-- whose units went with the lost data then writes no row). Two processes' reloads may
-- both do, one after the other; the later generation's copy replaces the earlier's.
-- A copy of the same or a newer generation is never replaced (a lock path's reload
-- starts no generation: two of them carry the same one).
--
-- KEYS[1]  sale:{sku}:info       the hash copy
-- KEYS[2]  sale:{sku}:stockgen   the generation the stock belongs to
-- KEYS[3]  sale:{sku}:stock      the units left (one integer key; see ARGV[3])
-- KEYS[4]  sale:{sku}:soldout    the sold-out flag
-- KEYS[5]  sale:{sku}:buyers     users with an order
-- KEYS[6]  the buyers read from the database, staged by the caller (SADD in chunks;
--          may be missing): moved into KEYS[5], or dropped
-- KEYS[7]  sale:{sku}:reloaded   set: the first lock section reads the stock from the
--                               database (webapp/section.py)
-- KEYS[8]  sale:{sku}:holdoff    no lock section sells while it lives
-- KEYS[9..] the rest of the sale's keys a newer generation replaces (reservations,
--          taken units, Idempotency-Key owners)
-- ARGV[1]  generation            the one read ('' : not known, not checked)
-- ARGV[2]  remaining             the database's units left
-- ARGV[3]  '1' to restore the stock key here ('0': the caller restores its own layout,
--          atomic-sharded's shards on other slots)
-- ARGV[4]  hold-off              '' : none (a lock-free path); '0': KEYS[7] only (a lock
--          kept elsewhere); n: KEYS[7], and KEYS[8] for n ms (a lock that lived in the
--          Redis that lost the sale: its holder may still be in its section)
-- ARGV[5..] the hash copy's fields and values
--
-- Returns 0: nothing written (the copy is back, or a newer generation stands);
--         1: restored; 2: restored, and the stock key was written here.
if redis.call('EXISTS', KEYS[1]) == 1 then
  local copied = tonumber(redis.call('HGET', KEYS[1], 'generation') or '')
  if ARGV[1] == '' or not copied or copied >= tonumber(ARGV[1]) then
    redis.call('DEL', KEYS[6])
    return 0
  end
  -- the copy of an older generation: an `atomic` reload that started one (see below)
  -- and lost the race to ours: its sale and what went with it are replaced
  redis.call('DEL', KEYS[1], KEYS[3], KEYS[4], KEYS[5])
  for i = 9, #KEYS do
    redis.call('DEL', KEYS[i])
  end
end
if ARGV[1] ~= '' then
  local current = tonumber(redis.call('GET', KEYS[2]) or '')
  if current and current > tonumber(ARGV[1]) then
    redis.call('DEL', KEYS[6])
    return 0
  end
  if current and current < tonumber(ARGV[1]) then
    redis.call('DEL', KEYS[3], KEYS[4], KEYS[5])
    for i = 9, #KEYS do
      redis.call('DEL', KEYS[i])
    end
  end
  redis.call('SET', KEYS[2], ARGV[1])
end
if redis.call('EXISTS', KEYS[6]) == 1 then
  redis.call('SUNIONSTORE', KEYS[5], KEYS[5], KEYS[6])
  redis.call('DEL', KEYS[6])
end
local restored = 1
if ARGV[3] == '1' and redis.call('SET', KEYS[3], ARGV[2], 'NX') then
  restored = 2
end
if tonumber(ARGV[2]) <= 0 then
  redis.call('SET', KEYS[4], '1')
end
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[7], '1')
  if tonumber(ARGV[4]) > 0 then
    redis.call('SET', KEYS[8], '1', 'PX', ARGV[4], 'NX')
  end
end
redis.call('HSET', KEYS[1], unpack(ARGV, 5))
return restored

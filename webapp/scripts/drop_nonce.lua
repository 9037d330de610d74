-- drop_nonce: forget a finished purchase's nonce for its user, if it is still theirs.
--
-- The first script of a purchase keeps its nonce for the reserved user
-- (sale:{sku}:reservations, for undo_lost.lua). A purchase that failed drops the
-- reservation (services._unreserve); its nonce was kept, one entry per refused
-- purchase piling up until the next reset (a security audit: 2,000 in 5 s). Only its
-- own: a twin of the same user reserved since keeps the nonce its own undo needs.
--
-- KEYS[1]  sale:{sku}:reservations
-- ARGV[1]  user_id
-- ARGV[2]  nonce
--
-- Returns 1 if dropped, 0 if the user's nonce is another purchase's (or none).
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0

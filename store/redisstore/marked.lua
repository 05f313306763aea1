-- marked.lua (after lib.lua): whether a UseOnce marker is set and not
-- expired, without setting it (storekit.OnceMarked).
-- KEYS: marker key. ARGV: now. Returns 1 when marked.
local v = redis.call('GET', KEYS[1])
if v and cmp(ARGV[1], v) <= 0 then
  return 1
end
return 0

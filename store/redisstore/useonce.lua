-- useonce.lua (after lib.lua): Store.UseOnce, a JWT's jti marker.
-- KEYS: marker key. ARGV: until, now. Returns 1 for the first use.
local v = redis.call('GET', KEYS[1])
if v and cmp(ARGV[2], v) <= 0 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl(ARGV[1], ARGV[2]))
return 1

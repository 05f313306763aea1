-- release.lua (after lib.lua): Store.Release (W144, webkit/RULES.md "Claims are
-- never stranded").
-- KEYS: claim token key.
-- ARGV: base, claim token, now, the token key's TTL in ms.
-- Returns 1 when a claim was undone, else 0.
local tokKey, base, token, now, tokTTL = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local tk = redis.call('GET', tokKey)
-- Whatever happens next, a Take with this token that runs later (its
-- reply was lost, or it ran after the caller gave up) claims nothing.
redis.call('SET', tokKey, 'r', 'PX', tokTTL)
if not tk or tk == 'r' then return 0 end
local op = base .. 'op:' .. tk
local f = redis.call('HMGET', op, 'state', 'claim', 'ap', 'as', 'fu', 'akey', 'k')
-- Only a claim still held by this token, whose outcome nobody reported:
-- after Finish(Unknown) the action may have taken effect.
if f[1] ~= 'performing' or f[2] ~= token or not f[3] or f[5] or gone(f[7], now) then
  return 0
end
local rev = f[3]
redis.call('HSET', op, 'state', 'open')
redis.call('HDEL', op, 'claim', 'ap', 'as', 'pa', 'u:' .. rev)
-- The approval applies again, in its first-recorded place (W95).
local t = redis.call('HGET', op, 't:' .. rev)
if f[6] and f[4] and t then
  local apr = apr_key(base, f[6], t)
  redis.call('ZADD', apr, f[4], tk .. ' ' .. rev)
  local x = redis.call('HGET', op, 'x:' .. rev)
  if x then keep(apr, ttl_ms(x, now)) end
end
return 1

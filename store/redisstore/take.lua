-- take.lua (after lib.lua): Store.Take, the Gate's one atomic step (§6
-- "Websites", §7).
-- KEYS: action key, the approvals key of these terms, claim token key.
-- ARGV: 1-14 as issue.lua, then the claim token, now + retention, the token
--       key's TTL in ms.
-- Returns {'claim', opID, revision, summary, terms, expires, approval, used}
-- or {'busy'} or {'issued', opID, revision, summary, terms, expires, new}
-- or {'released'} or {'lost'} or {'limited'}.
local base, apr, terms, now = ARGV[1], KEYS[2], ARGV[4], ARGV[9]
local tokKey, token, retained, tokTTL = KEYS[3], ARGV[15], ARGV[16], ARGV[17]

-- The caller chose the token, so that it can release what this step
-- claims even if the reply is lost (W144). A Take repeated with it (a
-- client's retry) gets the same claim, and one after Release claims
-- nothing.
local tk = redis.call('GET', tokKey)
if tk then
  if tk == 'r' then return {'released'} end
  local op = base .. 'op:' .. tk
  local f = redis.call('HMGET', op, 'state', 'claim', 'ap', 'k')
  if f[1] ~= 'performing' or f[2] ~= token or not f[3] or gone(f[4], now) then
    return {'lost'}
  end
  local rev = f[3]
  local r = redis.call('HMGET', op, 't:' .. rev, 's:' .. rev, 'x:' .. rev, 'a:' .. rev, 'u:' .. rev)
  if not r[1] or not r[3] then return {'lost'} end
  return {'claim', tk, rev, r[2] or '', r[1], r[3], r[4] or '', r[5] or now}
end

local busy = false
-- The live approvals of this owner's action with these terms, first
-- recorded first (W95); approvals of other terms are filed apart and cost
-- nothing here. They are filed under the owner's account, so no other
-- account's or signed-out approval is ever found (W104).
local live = redis.call('ZRANGE', apr, 0, -1, 'WITHSCORES')
for i = 1, #live, 2 do
  local m, score = live[i], live[i + 1]
  local opID, rev = string.match(m, '^(%S+) (%S+)$')
  local f = {}
  if opID then
    f = redis.call('HMGET', base .. 'op:' .. opID, 'state', 'k', 't:' .. rev, 'x:' .. rev, 'a:' .. rev, 'u:' .. rev)
  end
  local state, t, x = f[1], f[3], f[4]
  if not opID or not state or gone(f[2], now) or state == 'performed' or
      not x or not f[5] or f[6] or cmp(now, x) > 0 then
    -- Gone, performed (W141), expired (W103) or used up: it never
    -- applies again.
    redis.call('ZREM', apr, m)
  elseif t ~= terms then
    -- Check 3 fails for this request (W117); it may match another.
  elseif state == 'performing' then
    -- Check 2 fails for now (W145); a later approval may still be taken.
    busy = true
  elseif state == 'open' then
    -- The first recorded match (W95): use it up, and only it (W96, W98).
    -- Its score is kept, so that Release can put it back in its place.
    local op = base .. 'op:' .. opID
    redis.call('ZREM', apr, m)
    redis.call('HSET', op, 'state', 'performing', 'claim', token, 'ap', rev, 'u:' .. rev, now,
      'pa', now, 'as', score)
    redis.call('HDEL', op, 'fu')
    keep_until(op, retained, now) -- W138
    redis.call('SET', tokKey, opID, 'PX', tokTTL)
    local s = redis.call('HGET', op, 's:' .. rev)
    return {'claim', opID, rev, s or '', t, x, f[5], now}
  end
end
if busy then
  -- Issue nothing: a new operation now would invite a second approval of
  -- an action that may be taking effect (§7).
  return {'busy'}
end
local r = issue(base, KEYS[1], ARGV[2], ARGV[3], terms, ARGV[5], ARGV[6], ARGV[7], ARGV[8],
  now, ARGV[10], ARGV[11], ARGV[12], ARGV[13], ARGV[14])
if not r then return {'limited'} end
return {'issued', r[1], r[2], r[3], r[4], r[5], r[6] or ''}

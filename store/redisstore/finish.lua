-- finish.lua (after lib.lua): Store.Finish (§7), and Reconciler.Resolve.
-- KEYS: operation key.
-- ARGV: base, operation_id, claim token, outcome ('done', 'notdone',
--       'unknown'), now, now + retention, random part of a fresh revision,
--       '1' to resolve (whoever holds the claim) else '0', the account (to
--       resolve).
-- Returns 1, or 0 when the claim is no longer held (not performing).
local op, base, opID, token, outcome, now, retained = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local f = redis.call('HMGET', op, 'state', 'claim', 'ap', 'akey', 'al', 'k', 'cur', 'acct')
if f[1] ~= 'performing' or gone(f[6], now) then
  return 0
end
if ARGV[8] == '1' then
  if f[8] ~= ARGV[9] then return 0 end
elseif not f[2] or f[2] ~= token then
  return 0
end
if outcome == 'done' then
  redis.call('HSET', op, 'state', 'performed')
  redis.call('HDEL', op, 'claim', 'pa', 'as', 'fu')
  -- Remembered until the approved revision's expires_at, and for the
  -- retention at least (W137).
  local x = f[3] and redis.call('HGET', op, 'x:' .. f[3])
  if x then keep_until(op, x, now) end
  keep_until(op, retained, now)
  -- Its other approvals are never taken (W37, W141): drop them now rather
  -- than at the next Take.
  if f[4] then
    for _, r in ipairs(words(f[5])) do
      local t = redis.call('HGET', op, 't:' .. r)
      if t then redis.call('ZREM', apr_key(base, f[4], t), opID .. ' ' .. r) end
    end
  end
  -- No longer open: it leaves its owner's count of open operations.
  redis.call('ZREM', base .. 'open', opID)
elseif outcome == 'notdone' then
  -- W98: the operation waits again; its approval stays used up.
  redis.call('HSET', op, 'state', 'open')
  redis.call('HDEL', op, 'claim', 'ap', 'pa', 'as', 'fu')
  -- W90, W122: the used-up revision can't be approved again, so the
  -- operation offers the same terms under a fresh revision with the same
  -- expires_at: Lookup then names a revision an approval can still use,
  -- and the next request with these terms reuses it.
  local ap = f[3]
  if ap and f[7] == ap then
    local r = redis.call('HMGET', op, 't:' .. ap, 's:' .. ap, 'x:' .. ap)
    if r[1] and r[3] and cmp(now, r[3]) <= 0 then
      add_revision(op, opID, revision_name(r[3], ARGV[7]), r[1], r[2] or '', r[3])
    end
  end
else
  -- W142, W138: still performing, and kept while it is; the claim stays
  -- held so that the outcome can be reported once known, but it can no
  -- longer be released: the action may have taken effect.
  redis.call('HSET', op, 'fu', '1')
  keep_until(op, retained, now)
end
return 1

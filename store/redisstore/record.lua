-- record.lua (after lib.lua): Store.Record, checks 1-3 of §6 "What the
-- Company checks", answered in that order (W111).
-- KEYS: operation key; the request's single-use key when ARGV[11] is set.
-- ARGV: base, account, operation_id (of the ref), approval operation_id,
--       approval revision, now, approval JSON, check only ('1' or '0'),
--       random part of a fresh revision (see W122 below), the ref's
--       revision, the single-use key's until ('' for none).
-- Returns {code} or {code, opID, revision, summary, terms, expires}.
local op, base, acct, opID = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local apOp, apRev, now, approval, checkOnly = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
-- The request's single-use key (KEYS[2], until ARGV[11]), used up before
-- anything else: a replayed request records nothing.
if ARGV[11] and ARGV[11] ~= '' then
  local used = redis.call('GET', KEYS[2])
  if used and cmp(now, used) <= 0 then
    return {'replayed'}
  end
  redis.call('SET', KEYS[2], ARGV[11], 'PX', int(ttl_ms(ARGV[11], now)))
end
local f = redis.call('HMGET', op, 'state', 'acct', 'akey', 'cur', 'k', 't:' .. ARGV[10])
local state, owner, akey, cur = f[1], f[2], f[3], f[4]
if not state or not owner or not akey or not cur or gone(f[5], now) then
  return {'notfound'} -- W74, W45
end
if not f[6] then
  -- The ref names a revision this operation never returned (or no longer
  -- keeps): §4 "Any other reference" is not found, and records nothing.
  return {'notfound'} -- W74
end
-- Check 1 (§3 "Who can approve it").
if owner ~= acct then
  if acct == '' then return {'signin'} end -- W44
  return {'notfound'} -- W42, W43
end
-- Check 2 (W113).
if state == 'performing' then return {'performing'} end
if state == 'performed' then return {'performed'} end
if state ~= 'open' then return {'notfound'} end
-- Check 3: a revision returned for this very operation (W114, W116), not
-- expired (W115; W18: expires_at itself is accepted), and not used up: a
-- used-up approval never applies again, so "already recorded" would be a
-- 204 that records nothing usable (W90, W91); it gets a revision that can
-- still be approved instead (W122).
local c = redis.call('HMGET', op, 't:' .. cur, 's:' .. cur, 'x:' .. cur)
if not c[1] or not c[3] then
  return {'notfound'}
end
local x, used = false, false
if apOp == opID then
  local a = redis.call('HMGET', op, 'x:' .. apRev, 'u:' .. apRev)
  x, used = a[1], a[2]
end
if not x or cmp(now, x) > 0 or used then
  if cmp(now, c[3]) > 0 then
    return {'expired'} -- W101
  end
  if cur == apRev then
    -- Only reachable with another operation's id (W116): the answer must
    -- still not name the approval's revision (W122), so the same terms get
    -- a fresh revision, named as store.NewRevision names one.
    cur = revision_name(c[3], ARGV[9])
    add_revision(op, opID, cur, c[1], c[2] or '', c[3])
  end
  return {'mismatch', opID, cur, c[2] or '', c[1], c[3]} -- W100, W122
end
local r = redis.call('HMGET', op, 't:' .. apRev, 's:' .. apRev, 'a:' .. apRev)
if not r[1] then
  return {'notfound'}
end
local reply = {'recorded', opID, apRev, r[2] or '', r[1], x}
if r[3] then
  -- §7 "one that says the same": nothing new is recorded.
  reply[1] = 'already'
  return reply
end
-- At most MAX_APPROVALS per operation (webkit/RULES.md "Bounded work").
if #words(redis.call('HGET', op, 'al')) >= MAX_APPROVALS then
  return {'limited'}
end
if checkOnly == '1' then
  return reply -- §6 "Declining": the checks alone
end
-- First recorded first (W95): one past the highest score among the
-- action's live approvals of these terms.
local apr = apr_key(base, akey, r[1])
local top = redis.call('ZRANGE', apr, -1, -1, 'WITHSCORES')
local seq = (tonumber(top[2]) or 0) + 1
redis.call('ZADD', apr, int(seq), opID .. ' ' .. apRev)
local al = redis.call('HGET', op, 'al')
if al and al ~= '' then al = al .. ' ' .. apRev else al = apRev end
redis.call('HSET', op, 'a:' .. apRev, approval, 'al', al)
-- Kept until the approved revision's expires_at (W102).
keep_until(op, x, now)
keep(apr, ttl_ms(x, now))
return reply

-- record.lua (after lib.lua): Store.Record, checks 1-3 of §6 "What the
-- Company checks", answered in that order (W111).
-- KEYS: the operation key ("<base>op:<operation_id>", the ref's); the
--       request's single-use key when ARGV[9] is set.
-- ARGV: 1 account, 2 approval operation_id, 3 approval revision, 4 now,
--       5 approval JSON, 6 check only ('1' or '0'), 7 random suffix of a
--       fresh revision (see W122 below), 8 the ref's revision, 9 the
--       single-use key's until ('' for none), 10 the TTL in ms that keeps a
--       key until then.
-- Returns {code} or {code, opID, revision, summary, terms, expires}.
local op = KEYS[1]
local acct, apOp, apRev, now, approval, checkOnly = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local base, opID = string.match(op, '^(.*)op:([^:]*)$')
-- The request's single-use key, used up before anything else: a replayed
-- request records nothing.
if ARGV[9] and ARGV[9] ~= '' then
  -- One SET NX GET: set unless it is there, and what was there.
  local used = redis.call('SET', KEYS[2], ARGV[9], 'NX', 'PX', ARGV[10], 'GET')
  if used then
    if cmp(now, used) <= 0 then
      return {'replayed'}
    end
    -- Past its until (by the caller's clock) it may be used again.
    redis.call('SET', KEYS[2], ARGV[9], 'PX', ARGV[10])
  end
end
-- Everything the checks read, in one call: the operation, the ref's
-- revision, the approval's revision (when it names this operation) and the
-- current one's is read after, only when check 3 needs it.
local f = redis.call('HMGET', op, 'state', 'acct', 'cur', 'k', 'al', 'order', 't:' .. ARGV[8],
  't:' .. apRev, 's:' .. apRev, 'x:' .. apRev, 'a:' .. apRev, 'u:' .. apRev)
local state, owner, cur, k = f[1], f[2], f[3], f[4]
if not state or not owner or not cur or gone(k, now) then
  return {'notfound'} -- W74, W45
end
if not f[7] then
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
local t, s, x = f[8], f[9], f[10]
if apOp ~= opID then t, s, x = nil, nil, nil end
if not t or not x or cmp(now, x) > 0 or f[12] then
  local c = redis.call('HMGET', op, 't:' .. cur, 's:' .. cur, 'x:' .. cur)
  if not c[1] or not c[3] then
    return {'notfound'}
  end
  if cmp(now, c[3]) > 0 then
    return {'expired'} -- W101
  end
  if cur == apRev then
    -- Only reachable with another operation's id (W116): the answer must
    -- still not name the approval's revision (W122), so the same terms get
    -- a fresh revision, named as store.NewRevision names one.
    cur = revision_name(c[3], ARGV[7])
    add_revision(op, opID, base, nil, f[6], f[5], cur, c[1], c[2] or '', c[3], k, now)
  end
  return {'mismatch', opID, cur, c[2] or '', c[1], c[3]} -- W100, W122
end
local reply = {'recorded', opID, apRev, s or '', t, x}
if f[11] then
  -- §7 "one that says the same": nothing new is recorded.
  reply[1] = 'already'
  return reply
end
-- At most MAX_APPROVALS per operation (webkit/RULES.md "Bounded work").
local al = words(f[5])
if #al >= MAX_APPROVALS then
  return {'limited'}
end
if checkOnly == '1' then
  return reply -- §6 "Declining": the checks alone
end
-- First recorded first (W95): the approved revisions in the order recorded.
al[#al + 1] = apRev
redis.call('HSET', op, 'a:' .. apRev, approval, 'al', table.concat(al, ' '))
-- An operation is kept at least until each revision's expires_at (k), so
-- the approved one's (W102) needs nothing more.
return reply

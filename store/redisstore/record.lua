-- record.lua (after lib.lua): Store.Record, checks 1-3 of §6 "What the
-- Company checks", answered in that order (W111).
-- KEYS: 1 the operation key ("<base>op:<operation_id>", the ref's), 2 its
--       audit log ("<base>lg:<operation_id>", lib.lua log_write); for a
--       computed ref (ARGV[15]), 3 its action key and 4-5 its neighbours'
--       operation keys (lib.lua neighbour_allows); then the request's
--       single-use key when ARGV[9] is set; and on a single Redis, for a
--       computed ref, the agent's count of open operations (agent.lua).
-- ARGV: 1 account, 2 approval operation_id, 3 approval revision, 4 now,
--       5 approval JSON, 6 check only ('1'), decline ('d': the checks,
--       and the decline's audit entry when they pass) or '0', 7 random
--       suffix of a fresh revision (see W122 below), 8 the ref's revision,
--       9 the single-use key's until ('' for none), 10 the TTL in ms that
--       keeps a key until then, 11-13 the audit entry's (lib.lua audit),
--       14 base ("<prefix>{<slot>}:"), and for a computed ref
--       (computed.go): 15 'c', 16 its account, 17 terms, 18 summary, 19
--       expires_at, 20 agent, 21 user, 22 the owner's cap of open
--       operations, 23 the TTL in ms that keeps a key until 19, 24 when
--       it was minted, 25 19 plus the retention (kt: see below), 26 the
--       TTL in ms that keeps a key until 25, 27 the audit log's first
--       line as the caller composed it for the approval that stores the
--       operation (audit.go firstLine; '' when this request's approval
--       would not: see approve below), 28 the TTL in ms that keeps the log
--       until the later of 13 and 19, and with the agent's count: 29 the
--       agent's cap, 30 its members' prefix ("<slot> ").
-- Returns {code} or {code, opID, revision, summary, terms, expires}, and
-- {'recorded'} alone for the approval that stores a computed operation
-- (the caller knows the rest).
--
-- Cost (lib.lua): the caller names the keys it knows, and composes the
-- audit log of the approval that stores a computed operation.
local op, base = KEYS[1], ARGV[14]
local acct, apOp, apRev, now, approval, checkOnly = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local opID = string.sub(op, #base + 4)
local computed = ARGV[15] == 'c'
local au = {ARGV[11], ARGV[12], ARGV[13]}
-- The request's single-use key, used up before anything else: a replayed
-- request records nothing.
if ARGV[9] ~= '' then
  local onceKey = KEYS[3]
  if computed then onceKey = KEYS[6] end
  -- One SET NX GET: set unless it is there, and what was there.
  local used = redis.call('SET', onceKey, ARGV[9], 'NX', 'PX', ARGV[10], 'GET')
  if used then
    if cmp(now, used) <= 0 then
      return {'replayed'}
    end
    -- Past its until (by the caller's clock) it may be used again.
    redis.call('SET', onceKey, ARGV[9], 'PX', ARGV[10])
  end
end
local fresh = nil -- what the checks read, for an operation just stored
if computed then
  -- A computed operation (computed.go) is stored by the first approval
  -- sent for it, as Take would have stored it, and then checked like any
  -- other. Its ref was sealed by this store for this owner, so its
  -- revision was returned (W74).
  local actKey, rev, terms, summary, x = KEYS[3], ARGV[8], ARGV[17], ARGV[18], ARGV[19]
  local agentKey = ARGV[29] and KEYS[#KEYS]
  -- Most often nothing of the action is kept at all: not the operation,
  -- not its audit log, not its action key, not its neighbours. One EXISTS
  -- says so, and the reads below that would each find nothing are
  -- skipped.
  local nothing = redis.call('EXISTS', op, KEYS[2], actKey, KEYS[4], KEYS[5]) == 0
  local g, cur, prev = {}, nil, ''
  if not nothing then
    g = redis.call('HMGET', op, 'state', 'k', 'order', 'al', 'cur')
    local _
    cur, _, prev = current_of(redis.call('GET', actKey))
  end
  if g[1] and not gone(g[2], now) then
    -- Stored already. An open one gets the ref's revision if it does not
    -- keep it yet, as Take would have added it (W20), unless it has
    -- expired: an expired revision fails check 3 whatever the operation
    -- keeps, and must never become its current one, which would make a
    -- live operation read as expired (§6 check 3, W72, W101). It becomes
    -- the current one only if it lives at least as long as the current one.
    if g[1] == 'open' and cmp(now, x) <= 0 then
      local known = false
      for _, r in ipairs(words(g[3])) do
        if r == rev then known = true end
      end
      local curX = not known and g[5] and redis.call('HGET', op, 'x:' .. g[5])
      if not known and curX and cmp(curX, x) > 0 and via_of(g[5]) == '' then
        local fields, drop = revision_fields(g[3], g[4], rev, terms, summary, x, true)
        if drop then redis.call('HDEL', op, unpack(drop)) end
        redis.call('HSET', op, unpack(fields))
      elseif not known then
        local ak = nil
        if cur == opID then ak = actKey end
        add_revision(op, opID, base, ak, g[3], g[4], rev, terms, summary, x, g[2], now, ARGV[23], prev, agentKey, ARGV[30])
      end
    end
  else
    -- Not stored: not past its expires_at (the ref is then unknown, as a
    -- forgotten operation's is), and its action has no other remembered
    -- operation: neither the one its action key names nor one computed in
    -- the epoch before or after (stored since this ref was handed out, or
    -- performed after: the action keeps one operation, W19).
    if cmp(now, x) > 0 then return {'notfound'} end
    if cur and cur ~= opID and not gone(redis.call('HGET', base .. 'op:' .. cur, 'k'), now) then
      return {'notfound'}
    end
    if not nothing and not (neighbour_allows(KEYS[4], ARGV[24], now) and neighbour_allows(KEYS[5], ARGV[24], now)) then
      return {'notfound'}
    end
    if g[1] then redis.call('DEL', op) end -- forgotten by now, not collected yet
    local akey = string.sub(actKey, #base + 5)
    -- The approval of this very revision by its own account passes checks
    -- 1-3 on an operation just stored: it is recorded in the same write.
    -- c marks it computed: performed, it keeps when it was claimed
    -- (finish.lua, lib.lua neighbour_allows). Approved, it is likely to be
    -- claimed: its key is kept from the start until kt, its expires_at
    -- plus the retention, which covers what a claim before expires_at must
    -- keep (W138), so the claim makes no PEXPIRE of it (take.lua). Whether
    -- it is remembered is still judged by k alone.
    local extra = {'c', '1', 'kt', ARGV[25]}
    local approve = false
    if ARGV[16] == acct and apOp == opID and apRev == rev and checkOnly == '0' then
      approve = true
      extra = {'c', '1', 'kt', ARGV[25], 'a:' .. rev, approval, 'al', rev}
    end
    if not new_operation(base, actKey, akey, opID, rev, ARGV[16], ARGV[20], ARGV[21], terms, summary, x, now, ARGV[22], prev, ARGV[23], agentKey, ARGV[29], ARGV[30], extra, ARGV[26]) then
      return {'limited'}
    end
    if approve then
      if nothing and ARGV[27] ~= '' then
        -- No log yet: the one the caller composed, kept until the later of
        -- now plus the audit retention and x (lib.lua log_write).
        redis.call('SET', KEYS[2], '1:' .. later(au[3], x) .. '\n' .. ARGV[27], 'PX', ARGV[28])
      else
        audit(base, opID, au, rev, summary, x, terms, approval, nil, x, now, false, nil, nothing)
      end
      return {'recorded'}
    end
    -- Otherwise what the checks read is known without reading it.
    local t, s = false, false
    if apRev == rev then t, s = terms, summary end
    fresh = {'open', ARGV[16], rev, x, false, rev, terms, t, s, t and x, false, false}
  end
end
-- Everything the checks read, in one call: the operation, the ref's
-- revision, the approval's revision (when it names this operation) and the
-- current one's is read after, only when check 3 needs it.
local f = fresh or redis.call('HMGET', op, 'state', 'acct', 'cur', 'k', 'al', 'order', 't:' .. ARGV[8],
  't:' .. apRev, 's:' .. apRev, 'x:' .. apRev, 'a:' .. apRev, 'u:' .. apRev)
local state, owner, cur, k = f[1], f[2], f[3], f[4]
if not state or not owner or not cur or gone(k, now) then
  return {'notfound'} -- W74, W45
end
if not f[7] and not computed then
  -- The ref names a revision this operation never returned (or no longer
  -- keeps): §4 "Any other reference" is not found, and records nothing.
  -- (A computed ref's was returned: its seal says so. Its operation keeps
  -- it unless it is no longer open, which check 2 answers.)
  return {'notfound'} -- W74
end
-- Check 1 (§3 "Who can approve it").
if owner ~= acct then
  if acct == '' then return {'signin'} end -- W44
  return {'notfound'} -- W42, W43
end
-- Check 2 (W113).
if state == 'performing' then return {'performing'} end
if state == 'performed' then
  -- With what an API or MCP server answered the first time, when it was
  -- kept (finish.lua; §7 P90, M90).
  return {'performed', redis.call('HGET', op, 'ans') or ''}
end
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
    cur = revision_name(c[3], ARGV[7]) .. via_of(cur)
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
if checkOnly == 'd' then
  -- §6 "Declining": the decline's entry, and nothing recorded (W134).
  if not audit(base, opID, au, apRev, s, x, t, approval, nil, k, now, true) then return {'limited'} end
  return reply
end
if checkOnly ~= '0' then
  return reply -- the checks alone
end
-- First recorded first (W95): the approved revisions in the order recorded.
al[#al + 1] = apRev
redis.call('HSET', op, 'a:' .. apRev, approval, 'al', table.concat(al, ' '))
audit(base, opID, au, apRev, s, x, t, approval, nil, k, now)
-- An operation is kept at least until each revision's expires_at (k), so
-- the approved one's (W102) needs nothing more.
return reply

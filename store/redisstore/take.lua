-- take.lua (after lib.lua): Store.Take, the Gate's one atomic step (§6
-- "Websites", §7).
-- KEYS: the action key, the claim token key, the index of performing
--       operations of its hash slot ("<prefix>pf:{<tag>}", reconcile.go),
--       the marker to check first (storekit.MarkedInTake: Unbind's for
--       the browser's join cookie, a UseOnce key of this slot; the action
--       key again when there is none), the key of the operation the
--       caller computes (computed.go; the action key again when it
--       computes none), and on a single Redis the agent's count of open
--       operations (agent.lua).
-- ARGV: 1 the account, 2 terms, 3 now, 4 the claim token, 5 now +
--       retention, 6 the TTL in ms that keeps a key until then, 7 the
--       token key's TTL in ms, 8 now + that TTL (when the token is
--       forgotten), 9-11 the audit entry of a claim (lib.lua audit: its
--       head, audit.go entryHeadOf; the terms' digest; now + the audit
--       retention), 12 the TTL in ms that keeps a key until that, 13 which
--       approval a claim may use (storedriver.TakeRequest.Via, Approved):
--       '' the first recorded of a website's revisions, '-' none (a request
--       through an API or MCP server without an approval), else that
--       revision's only (the one the request's approval names), 14 what
--       only issuing needs, as one JSON array of strings (redisstore.go
--       jsonStrings), read only
--       there: issue.lua's ARGV 3-6 and 8-12 (summary, fixed expires_at,
--       a fresh revision's expires_at, the least a reused one may have,
--       seed, agent, user, the owner's cap, the TTL that keeps a key until
--       that expires_at), then the instant before which a claim never
--       marked started may be undone ('' never); and with the agent's
--       count: 15 the agent's cap, 16 its members'
--       prefix ("<slot> "). (Each argument costs the server a Lua string,
--       about 1.3 k instructions: the 403's step reads none of them.)
-- The marker (KEYS[4]) is checked when it is not the action key.
--
-- A claim is made unstarted (st '0'): its handler may run only once the
-- claimer's start mark (start.lua) has found it still held and marked it
-- started (st '1'), in one atomic step. Until then it may be undone, by
-- its holder's Release or, once claimed before that instant, by the next
-- request for the action (here) or by Performing (tidy.lua): a Take that
-- Redis ran after its caller gave up never strands an approval, and the
-- late caller's start mark then fails, so its handler never runs.
-- Returns {'claim', opID, revision, summary, terms, expires, approval, used}
-- or {'busy'} or {'issued', opID, revision, summary, terms, expires, new},
-- where terms '' means the request's (stored terms are never empty)
-- or {'released'} or {'lost'} or {'limited'} or {'marked'} (the marker
-- is set: nothing done), or {'compute'} when the caller is to compute a
-- new operation (computed.go).
-- The 403 step in its most common case: no marker, no
-- claim with this token, nothing stored for the action, and the operation
-- the caller computes (KEYS[5], its id ends the seed) not kept either: one
-- EXISTS says so, and this is what issue (lib.lua) would answer then,
-- without reading the rest. (When any of them is kept, the steps below
-- read them and judge by their keep-until.) The caller names every key,
-- so that this costs no string work here.
local actKey, tokKey = KEYS[1], KEYS[2]
if KEYS[5] ~= actKey and redis.call('EXISTS', tokKey, actKey, KEYS[5], KEYS[4]) == 0 then
  return {'compute'}
end
local acct, terms, now, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
-- The token's claim, the action's operation, and the marker when there is
-- one to check, in one read.
local v
if KEYS[4] ~= actKey then
  v = redis.call('MGET', tokKey, actKey, KEYS[4])
  -- A marker that is set and not expired (useonce.lua): Unbind ended the
  -- browser's binding, so this is no joined browser's request.
  if v[3] and cmp(now, v[3]) <= 0 then return {'marked'} end
else
  v = redis.call('MGET', tokKey, actKey)
end
-- The token key is "<base>tok:<token>" (redisstore.go).
local base = string.sub(tokKey, 1, #tokKey - #token - 4)

-- The caller chose the token, so that it can release what this step
-- claims even if the reply is lost (W144). A Take repeated with it (a
-- client's retry) gets the same claim, and one after Release claims
-- nothing.
local tk = token_of(v[1], now)
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

local opID, hint, prev = current_of(v[2])
local agentKey, agentMember = KEYS[6], ARGV[16]
local only = ARGV[13]
-- Being performed, or its outcome not known yet: nothing is claimed and
-- nothing issued, since a new operation now would invite a second approval
-- of an action that may be taking effect (W145, §7). That is the action's
-- operation, or one an earlier version's Issue replaced while it performed
-- (action_value), however long ago the action's own operation expired.
if performing(base, prev, now) then
  return {'busy'}
end
local f, c, op = false, false, nil
if opID then
  op = base .. 'op:' .. opID
  f = read_operation(op, hint)
  -- The action's operations are filed under the owner's account (the
  -- action key's digest), so no other account's or signed-out approval is
  -- ever found (W104).
  if f[2] == acct and not gone(f[3], now) then
    if f[1] == 'performing' then
      -- A claim never marked started, made long enough ago, has no
      -- handler running and none to come (its start mark would now fail):
      -- undo it, and claim for this request instead. Any other is busy.
      local unstartedBefore = cjson.decode(ARGV[14])[10]
      local p = redis.call('HMGET', op, 'st', 'fu', 'pa', 'claim', 'ap')
      if p[1] ~= '0' or p[2] or not p[3] or not p[5] or unstartedBefore == '' or cmp(p[3], unstartedBefore) >= 0 then
        return {'busy'}
      end
      -- Its entry says released (l), made for this request (the caller's
      -- head for a claim, renamed; the undone revision's own terms).
      audit_unclaim(base, op, opID, p[5], f[3], now, {'l' .. string.sub(ARGV[9], 2), '', ARGV[11]})
      unclaim(base, op, opID, p[4], p[5], f[3], now, KEYS[3], ARGV[7], ARGV[8], agentKey, agentMember)
      f[1] = 'open'
      -- The hinted revision's used-at was read before the undo.
      if p[5] == hint then f[11] = false end
    end
    if f[1] == 'open' then
      -- Its recorded approvals, first recorded first (W95), and its current
      -- revision.
      local cur = f[4]
      local al, g
      if f[5] == cur and hint == cur then
        -- The common case: one approval, of the current revision, which
        -- the read above named.
        al, g = {cur}, {f[7], f[8], f[9], f[10], f[7], f[8], f[9], f[10], f[11]}
      else
        al = words(f[5])
        g = revisions_of(f, hint, op, al)
      end
      for i, r in ipairs(al) do
        local j = 5 * i
        local t, s, x, ap, used = g[j], g[j + 1], g[j + 2], g[j + 3], g[j + 4]
        -- The first recorded one of these very terms (W117) that is
        -- neither used up (W96, W98) nor expired (W103): use it up, and
        -- only it.
        -- Only an approval of this interface's revisions, and through an
        -- API or MCP server only the one the request carries (only).
        if t == terms and x and ap and not used and cmp(now, x) <= 0 and
            ((only == '' and via_of(r) == '') or (only ~= '' and only ~= '-' and r == only)) then
          local retained, retainedTTL = ARGV[5], ARGV[6]
          local k = later(retained, f[3]) -- W138
          -- The claim's entry first: a full log refuses the claim. It
          -- knows the terms' digest, which then takes the place of terms
          -- an earlier entry had to keep (lib.lua log_write).
          local ok, ll, lh, ld = log_write(base .. 'lg:' .. opID, entry_of(ARGV[9], now, r, s, x, ARGV[10], nil, ap), ARGV[11], ARGV[12],
            k, now, true, {terms_field(terms), ARGV[10]})
          if not ok then
            return {'limited'}
          end
          -- What its entry said, for Finish's (lib.lua log_prev).
          redis.call('HSET', op, 'state', 'performing', 'claim', token, 'ap', r, 'u:' .. r, now,
            'pa', now, 'k', k, 'st', '0', 'll', ll, 'lh', lh, 'ld', ld)
          -- Listed by Performing through its slot's index, not a SCAN.
          local idx = KEYS[3]
          redis.call('ZADD', idx, index_score(now), op)
          extend(idx, retainedTTL)
          if k ~= f[3] then
            -- Not when its key is kept that long already (kt, record.lua).
            if not f[12] or cmp(retained, f[12]) > 0 then extend(op, retainedTTL) end
            -- The action key lives as long too, so that the action stays
            -- busy however long the operation performs (W145, W138).
            -- Always: a revision added since may have set its TTL anew.
            extend(actKey, retainedTTL)
          end
          -- Being performed, it leaves the counts of open operations (its
          -- owner's, and its agent's when on this server): an approval
          -- bounds it, not the caps. Reopened, it comes back (finish.lua,
          -- release.lua).
          redis.call('ZREM', base .. 'open', opID)
          if agentKey then redis.call('ZREM', agentKey, agentMember .. opID) end
          redis.call('SET', tokKey, opID .. ' ' .. ARGV[8], 'PX', ARGV[7])
          return {'claim', opID, r, s or '', '', x, ap, now} -- '': the request's terms
        end
      end
      c = {g[1], g[2], g[3], g[4]}
    end
  end
end
-- Nothing to claim: the operation to answer with (lib.lua issue).
local p = cjson.decode(ARGV[14])
local seed = p[5]
-- The seed ends with '.' or '!' and the operation_id to compute ('' when
-- it can't be; lib.lua computed_of).
local compute, storeAs = computed_of(seed)
local a = {
  base = base, actKey = actKey, akey = string.sub(actKey, #base + 5),
  acct = acct, terms = terms, summary = p[1], fixed = p[2],
  x = p[3], half = p[4], now = now, seed = seed, compute = compute, storeAs = storeAs,
  agent = p[6], user = p[7], maxOpen = p[8], xttl = p[9],
  agentKey = agentKey, maxAgent = ARGV[15], agentMember = agentMember,
  opID = opID or false, hint = hint, prev = prev, f = f, c = c,
}
local r = issue(a)
if not r then return {'limited'} end
if r[1] == 'compute' then return r end
-- The terms are the request's: '' spares sending them back.
return {'issued', r[1], r[2], r[3], '', r[5], r[6] or ''}

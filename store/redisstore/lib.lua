-- lib.lua: what every script shares. Each script is this file followed by its
-- own, so that every state change is one atomic EVALSHA (webkit/RULES.md "The store").
--
-- Times are the caller's clock as Unix nanoseconds in decimal strings, never
-- Redis TIME, so every web server judges expiry alike (store package doc).
-- They are compared exactly as strings (cmp); only TTLs, which merely collect
-- garbage, are computed with (inexact) Lua numbers.
--
-- Every key a script touches is "<prefix>{<slot>}:..." with one hash tag, so
-- the keys it builds (an operation found through the action key, the claim
-- token of an operation) are in the slot of its declared KEYS: the scripts
-- run unchanged on Redis, Redis Cluster and miniredis.
--
-- Cost: each redis.call costs the server about a microsecond, so a step
-- reads what it needs with one MGET or HMGET, writes with one HSET, and
-- leaves a TTL alone unless it must grow (package doc, "Cost per step").

-- GRACE_MS is added to every TTL: a key outlives what it must keep by a
-- minute, so that clock skew between web servers never loses a record early.
local GRACE_MS = 60000
-- MAX_REVISIONS caps an operation's revisions, so that a page reloaded with
-- ever-changing terms can't grow one hash without bound.
local MAX_REVISIONS = 32
-- MAX_APPROVALS caps an operation's approvals (store.MaxApprovalsPerOperation):
-- with at most that many approved, a revision beyond MAX_REVISIONS always
-- finds a never-approved one to drop.
local MAX_APPROVALS = 16

-- cmp compares two decimal integer strings exactly: -1, 0 or 1.
local function cmp(a, b)
  local na, nb = string.sub(a, 1, 1) == '-', string.sub(b, 1, 1) == '-'
  if na ~= nb then
    if na then return -1 end
    return 1
  end
  local r
  if a == b then
    return 0
  elseif #a ~= #b then
    r = (#a < #b) and -1 or 1
  else
    r = (a < b) and -1 or 1
  end
  if na then r = -r end
  return r
end

-- ttl is the TTL in milliseconds, as a decimal string, that keeps a key
-- until untilNs plus the grace (gopher-lua and Lua 5.1 would otherwise be
-- free to print a number with an exponent).
local function ttl(untilNs, nowNs)
  local ms = math.floor(((tonumber(untilNs) or 0) - (tonumber(nowNs) or 0)) / 1e6)
  if ms < 0 then ms = 0 end
  return string.format('%d', ms + GRACE_MS)
end

-- later is the later of two instants (decimal strings; b may be nil).
local function later(a, b)
  if not b or cmp(a, b) > 0 then return a end
  return b
end

local function words(s)
  local out = {}
  if s then
    for w in string.gmatch(s, '%S+') do out[#out + 1] = w end
  end
  return out
end

-- gone reports whether an operation is unknown or forgotten by the caller's
-- clock: past its keep-until k, it is gone whether or not its TTL has fired
-- yet, so answers never depend on when Redis collects it.
local function gone(k, now)
  return not k or cmp(now, k) > 0
end

-- extend makes a key that already has a TTL live at least ttlMs more; it
-- never shortens one, so one record's needs never cut another's (W102,
-- W137, W138). A key without a TTL (a set just created) gets this one.
local function extend(key, ttlMs)
  if redis.call('PEXPIRE', key, ttlMs, 'GT') == 0 then
    redis.call('PEXPIRE', key, ttlMs, 'NX')
  end
end

-- revision_name names a fresh revision expiring at x (Unix ns) as
-- store.NewRevision does: its Unix seconds, '-', the random suffix.
local function revision_name(x, suffix)
  local sec = '0'
  if #x > 9 then sec = string.sub(x, 1, #x - 9) end
  return sec .. '-' .. suffix
end

-- via_of is the interface suffix of a revision's name ('_api', '_mcp';
-- storekit.ViaRevision): '' for a website's, whose part after its '-' is
-- exactly 16 characters. Each revision is the one interface's that
-- returned it (storedriver.TakeRequest.Via).
local function via_of(rev)
  if not rev then return '' end
  local d = string.find(rev, '-', 1, true)
  if not d or #rev <= d + 17 or string.sub(rev, d + 17, d + 17) ~= '_' then return '' end
  return string.sub(rev, d + 17)
end

-- seed_via is the interface a seed names ('~' and its name after the
-- seed's random characters, before what computed_of reads), as via_of
-- gives it: '' for the website.
local function seed_via(seed)
  local v = string.match(seed, '~(%w+)')
  if not v then return '' end
  return '_' .. v
end

-- latest_of_via is the name of the latest revision of interface via
-- (via_of) in an operation's order; nil for none.
local function latest_of_via(order, via)
  local revs = words(order)
  for i = #revs, 1, -1 do
    if via_of(revs[i]) == via then return revs[i] end
  end
  return nil
end

-- revision_fields are the fields that make rev (terms t, summary s,
-- expires_at x) the current revision of an operation whose revisions were
-- order and whose approved ones al. Beyond MAX_REVISIONS the oldest
-- never-approved one is dropped (its fields are returned in drop); approved
-- ones are kept for check 3 and "already recorded" (§6, §7).
--
-- With before, rev is kept without becoming the current revision: it goes
-- just before the current one in order, and 'cur' is left alone (a
-- revision returned earlier than the current one, record.lua).
local function revision_fields(order, al, rev, terms, summary, x, before)
  local revs = words(order)
  if before and #revs > 0 then
    table.insert(revs, #revs, rev)
  else
    revs[#revs + 1] = rev
  end
  local drop = nil
  if #revs > MAX_REVISIONS then
    local approved = {}
    for _, r in ipairs(words(al)) do approved[r] = true end
    for i = 1, #revs - 1 do
      local r = revs[i]
      if not approved[r] then
        table.remove(revs, i)
        drop = {'t:' .. r, 's:' .. r, 'x:' .. r}
        break
      end
    end
  end
  if before and #revs > 1 then
    return {'t:' .. rev, terms, 's:' .. rev, summary, 'x:' .. rev, x,
      'order', table.concat(revs, ' ')}, drop
  end
  return {'t:' .. rev, terms, 's:' .. rev, summary, 'x:' .. rev, x,
    'cur', rev, 'order', table.concat(revs, ' ')}, drop
end

-- action_value is what an action key holds: its operation's id, the
-- current revision's name (a hint: Take reads that revision with the
-- operation, and reads again when the hint is stale), and the id of an
-- operation still being performed that it replaced, if any. This kit
-- never replaces one being performed (Issue adds a revision to it), but
-- an earlier version's Issue did: its servers may share the Redis during
-- a rolling deploy, so the third id is still read, kept and obeyed.
local function action_value(opID, rev, prev)
  local v = opID .. ' ' .. rev
  if prev and prev ~= '' then v = v .. ' ' .. prev end
  return v
end

-- set_action points the action key at operation opID, revision rev, and
-- keeps it at least t ms. While prev, an operation it replaced, may still
-- be performing, the key keeps its TTL if that is longer: prev keeps the
-- action busy as long as it performs (W145, W138).
local function set_action(actKey, opID, rev, prev, t)
  local v = action_value(opID, rev, prev)
  if prev and prev ~= '' then
    redis.call('SET', actKey, v, 'KEEPTTL')
    extend(actKey, t)
  else
    redis.call('SET', actKey, v, 'PX', t)
  end
end

-- add_revision makes rev op's current revision (fields from
-- revision_fields), kept until x at least: the operation (its k and TTL),
-- its place in the owner's open set, and its action key follow (W102).
-- k is the operation's keep-until before. actKey, when given, gets the new
-- revision as its hint (prev kept); agentKey, when given (the agent's
-- count on this server, new_operation), the operation's longer life.
-- With before (another interface's revision, which never replaces a
-- website's current one: lib.lua issue), rev is kept without becoming
-- the current revision, and the action key's hint stays hint.
local function add_revision(op, opID, base, actKey, order, al, rev, terms, summary, x, k, now, xttl, prev, agentKey, agentMember, before, hint)
  local fields, drop = revision_fields(order, al, rev, terms, summary, x, before)
  if before then rev = hint end
  if drop then redis.call('HDEL', op, unpack(drop)) end
  if not k or cmp(x, k) > 0 then
    -- Kept longer than before: the operation, its count among the owner's
    -- open ones, and the action key that finds it.
    fields[#fields + 1] = 'k'
    fields[#fields + 1] = x
    redis.call('HSET', op, unpack(fields))
    local t = xttl or ttl(x, now)
    extend(op, t)
    local open = base .. 'open'
    redis.call('ZADD', open, 'XX', 'GT', x, opID)
    extend(open, t)
    if actKey then set_action(actKey, opID, rev, prev, t) end
    if agentKey then
      redis.call('ZADD', agentKey, 'XX', 'GT', x, agentMember .. opID)
      redis.call('PEXPIRE', agentKey, t, 'GT')
    end
  else
    redis.call('HSET', op, unpack(fields))
    if actKey then redis.call('SET', actKey, action_value(opID, rev, prev), 'KEEPTTL') end
  end
end

-- under_cap returns how many members the sorted set key of open operations
-- (scored by when each is forgotten) has, once those forgotten by now are
-- dropped when the count reaches cap; nil when it is at cap all the same.
local function under_cap(key, cap, now)
  local n = redis.call('ZCARD', key)
  if n >= tonumber(cap) then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. now)
    n = redis.call('ZCARD', key)
    if n >= tonumber(cap) then return nil end
  end
  return n
end

-- add_open files member, forgotten at x, in the sorted set key of open
-- operations, which had n members (under_cap), and keeps the set at least
-- t ms. A set is created with a TTL and keeps one (Redis deletes an empty
-- set), so one PEXPIRE does, even when the TTL is already that long.
local function add_open(key, n, x, member, t)
  redis.call('ZADD', key, x, member)
  if n == 0 then
    redis.call('PEXPIRE', key, t)
  else
    redis.call('PEXPIRE', key, t, 'GT')
  end
end

-- reopen puts operation opID, open again until k (not performed after
-- all, or released), back in its owner's count of open operations, and
-- its agent's when agentKey is given (on this server).
local function reopen(base, opID, k, now, agentKey, agentMember)
  local t = ttl(k, now)
  local open = base .. 'open'
  redis.call('ZADD', open, k, opID)
  extend(open, t)
  if agentKey then
    redis.call('ZADD', agentKey, k, agentMember .. opID)
    extend(agentKey, t)
  end
end

-- index_score is a claim's score in its hash slot's index of performing
-- operations (the "pf:" key, Store.Performing): its claimed-at instant in
-- whole milliseconds, which a sorted set's score keeps exactly
-- (nanoseconds it would round).
local function index_score(t)
  if #t <= 6 then return '0' end
  return string.sub(t, 1, #t - 6)
end

-- unclaim undoes the claim of operation opID (key op), held by claimTok
-- with approval ap, whose handler never ran (release.lua; a claim never
-- marked started, take.lua and tidy.lua): the operation waits again until
-- k, its approval applies again in its first-recorded place (W95, W144),
-- it leaves the index idx of performing operations, and, when claimTok
-- is given, its token is marked released (a Take or start mark with it
-- later claims nothing).
local function unclaim(base, op, opID, claimTok, ap, k, now, idx, tokTTL, tokUntil, agentKey, agentMember)
  redis.call('HSET', op, 'state', 'open')
  redis.call('HDEL', op, 'claim', 'ap', 'pa', 'st', 'u:' .. ap, 'll', 'lh', 'ld', 'la', 'lu')
  reopen(base, opID, k, now, agentKey, agentMember)
  if idx then redis.call('ZREM', idx, op) end
  if claimTok then redis.call('SET', base .. 'tok:' .. claimTok, 'r ' .. tokUntil, 'PX', tokTTL) end
end

-- new_operation opens operation opID for an action (its digest akey, its
-- key actKey) with revision rev as its first, and extra fields (its first
-- approval and c, record.lua; ka, issue), unless the owner's cap of
-- open operations (maxOpen) is reached, or, when agentKey is given, the
-- agent's (maxAgent; its count's members are agentMember .. opID): then it
-- returns false. prev is an operation of the action still being performed
-- that an earlier version replaced ('' for none, action_value): the action
-- key keeps naming it, so that Take stays busy while it is (W145).
-- keepTTL, when given, is a longer TTL in ms for the operation's key than
-- xttl (which keeps a key until x; record.lua's kt). Only the operation's:
-- the action key's TTL is set anew whenever a revision keeps the operation
-- longer (add_revision), so it could not be relied on to stay that long.
local function new_operation(base, actKey, akey, opID, rev, acct, agent, user, terms, summary, x, now, maxOpen, prev, xttl, agentKey, maxAgent, agentMember, extra, keepTTL)
  local open = base .. 'open'
  -- The owner's open operations: forgotten ones leave by their score (their
  -- k) when the count is reached, performed ones when performed.
  local n = under_cap(open, maxOpen, now)
  if not n then return false end
  -- The agent's, in this same step when its count is on the same server
  -- (a single Redis: agentKey given), else in a step of its own (agent.lua).
  local m
  if agentKey then
    m = under_cap(agentKey, maxAgent, now)
    if not m then return false end
  end
  local op = base .. 'op:' .. opID
  local t = xttl
  redis.call('HSET', op, 'state', 'open', 'acct', acct, 'akey', akey, 'ag', agent, 'us', user, 'k', x,
    't:' .. rev, terms, 's:' .. rev, summary, 'x:' .. rev, x, 'cur', rev, 'order', rev, unpack(extra))
  redis.call('PEXPIRE', op, keepTTL or t)
  -- The action key lives as long as its operation, so a repeated request
  -- keeps its operation_id (W19).
  set_action(actKey, opID, rev, prev, t)
  add_open(open, n, x, opID, t)
  if agentKey then
    -- Counted until its first revision expires, or until it is performed
    -- (Finish pipelines a ZREM), as agent.lua counts.
    add_open(agentKey, m, x, agentMember .. opID, t)
  end
  return true
end

-- neighbour_allows reports whether an approval may store a computed
-- operation minted at minted (computed.go), given the key of one of its
-- two neighbours (the operations its action gets in the epochs before
-- and after, internal/computed; record.lua asks of both): it is not
-- remembered by now, unless performed before it was minted (it is then
-- the action's next operation, W141). At an epoch's turn two requests get two operation_ids;
-- so the action still has one operation at a time (W19), and a ref handed
-- out before its neighbour was performed never stores a second.
local function neighbour_allows(key, minted, now)
  local n = redis.call('HMGET', key, 'state', 'k', 'pa')
  return gone(n[2], now) or (n[1] == 'performed' and n[3] and cmp(n[3], minted) < 0) or false
end

-- token_of reads a claim token key's value: the operation the token
-- claimed, or 'r' once released, then the instant (Unix ns) after which
-- the token is forgotten, so that answers never depend on when Redis
-- collects the key. nil when there is none or it is forgotten by now. (A
-- value without the instant, from an earlier version, lasts its TTL.)
local function token_of(v, now)
  if not v then return nil end
  local what, till = string.match(v, '^(%S+) (%S+)$')
  if not what then return v end
  if cmp(now, till) > 0 then return nil end
  return what
end

-- current_of reads an action key's value (action_value): the action's
-- current operation_id, its current revision's name ('' for none) and the
-- operation still performing that it replaced ('' for none). Operation ids
-- start with op_, revision names never do.
local function current_of(v)
  if not v then return nil, '', '' end
  local id, hint, prev = nil, '', ''
  for w in string.gmatch(v, '%S+') do
    if not id then
      id = w
    elseif string.sub(w, 1, 3) == 'op_' then
      prev = w
    else
      hint = w
    end
  end
  return id, hint, prev
end

-- names reports whether an action key's value v (action_value, false
-- for none) names operation id as the action's current one, as
-- current_of reads it.
local function names(v, id)
  return v and (v == id or string.sub(v, 1, #id + 1) == id .. ' ') or false
end

-- performing reports whether operation id (of the owner at base) is being
-- performed and not forgotten.
local function performing(base, id, now)
  if id == '' then return false end
  local f = redis.call('HMGET', base .. 'op:' .. id, 'state', 'k')
  return f[1] == 'performing' and not gone(f[2], now)
end

-- issue returns the operation for an action, after Take found nothing to
-- claim (or for Issue): {opID, revision, summary, terms, expires} and, for a
-- new operation, a sixth element 'new'; nil when a new operation would pass
-- the owner's cap. The action's current operation while it is open (W19,
-- W20), else a new one (W141); its current revision while it is reusable,
-- else a fresh one (W24, W25, W36).
--
-- a is what the script read: base, actKey, akey, opID (the action's current
-- operation or nil), prev, f (its fields state, acct, k, cur, al, order),
-- c (its current revision's t, s, x, a), and the request's acct, terms,
-- summary, fixed expires_at ('' for none), x (a fresh revision's
-- expires_at), half (the least expires_at a reused revision may have,
-- W39), now, seed (random: a new operation_id, then a revision's suffix),
-- compute (the seed ends with '.' and the operation_id the caller
-- computes for a new operation, which is then not stored: '' when it
-- can't be computed),
-- agent, user, maxOpen, xttl (the TTL in ms that keeps a key until x).
local function issue(a)
  local f, c, now = a.f, a.c, a.now
  local prev = a.prev or ''
  -- Open, or being performed (Issue; Take answers busy first): the
  -- action's operation. One being performed gets a revision for other
  -- terms, which no approval can use while it performs (check 2): no second
  -- operation of the action is offered while the first may be taking
  -- effect (W145). Once performed, a new one (W141).
  local via = seed_via(a.seed)
  if a.opID and (f[1] == 'open' or f[1] == 'performing') and f[2] == a.acct and not gone(f[3], now) then
    local cur = f[4]
    -- The interface's latest revision: each revision is the one
    -- interface's that returned it (storedriver.TakeRequest.Via).
    if cur and via_of(cur) ~= via then
      cur = latest_of_via(f[6], via)
      c = cur and redis.call('HMGET', a.base .. 'op:' .. a.opID, 't:' .. cur, 's:' .. cur, 'x:' .. cur, 'a:' .. cur)
    end
    local x = c and c[3]
    -- Reusable: same terms (W24), not expired, the same fixed expires_at
    -- (W25) or half its lifetime left (W39), and never approved, so that
    -- an operation whose approval was used up without performing can be
    -- approved again (W98).
    if cur and c[1] == a.terms and x and not c[4] and cmp(now, x) <= 0 and
        ((a.fixed == '' and cmp(x, a.half) >= 0) or (a.fixed ~= '' and x == a.fixed)) then
      return {a.opID, cur, c[2] or '', a.terms, x}
    end
    local rev = revision_name(a.x, string.sub(a.seed, 21, 36)) .. via
    -- Another interface's revision never replaces the website's current
    -- one, which Lookup and Record answer a website's refs with (W72,
    -- W100).
    local before = via ~= '' and f[4] and via_of(f[4]) == ''
    add_revision(a.base .. 'op:' .. a.opID, a.opID, a.base, a.actKey, f[6], f[5], rev, a.terms, a.summary, a.x, f[3], now, a.xttl, prev, a.agentKey, a.agentMember, before, f[4])
    return {a.opID, rev, a.summary, a.terms, a.x}
  end
  -- Nothing is stored for a new operation (§3: a Company doesn't have to
  -- store operations that haven't been performed): the caller computes
  -- it, and its first approval stores it (record.lua). When it can't be
  -- computed (compute '': terms too long for a ref, a lifetime beyond the
  -- retention), or while the action's operation is remembered
  -- (performed), or the one the caller would compute is (performed: its
  -- action key went with its claim), the new one is stored, with a random
  -- operation_id (W141), and marked (ka) so that its action key outlives
  -- its performance (finish.lua): a computed ref handed out before it
  -- then can't store another operation of the action (record.lua).
  local extra = {'ka', '1'}
  local opID = 'op_' .. string.sub(a.seed, 1, 20)
  if a.compute ~= '' and not (a.opID and f[1] == 'performed' and not gone(f[3], now)) then
    local kept = redis.call('HGET', a.base .. 'op:' .. a.compute, 'k')
    if gone(kept, now) then
      if not a.storeAs then return {'compute'} end
      -- One whose revision could still be approved after the epoch's turn
      -- (computed.Crosses) is stored now, under the operation_id the caller
      -- computed, marked c as an approval would store it (record.lua): the
      -- requests after the turn find it through the action key, so the
      -- action keeps one operation_id across the turn (W19, W20).
      if kept then redis.call('DEL', a.base .. 'op:' .. a.compute) end -- forgotten, not collected yet
      extra, opID = {'c', '1'}, a.compute
    end
  end
  local rev = revision_name(a.x, string.sub(a.seed, 21, 36)) .. via
  if not new_operation(a.base, a.actKey, a.akey, opID, rev, a.acct, a.agent, a.user, a.terms, a.summary, a.x, now, a.maxOpen, prev, a.xttl, a.agentKey, a.maxAgent, a.agentMember, extra) then
    return nil
  end
  return {opID, rev, a.summary, a.terms, a.x, 'new'}
end

-- read_operation reads operation op (key) for an action whose key hints
-- at revision h: its state, acct, k, cur, al and order, then revision h's
-- t, s, x, a and u (fields 7-11), and kt (12: until when its key is kept
-- already, record.lua), in one read.
local function read_operation(op, h)
  return redis.call('HMGET', op, 'state', 'acct', 'k', 'cur', 'al', 'order',
    't:' .. h, 's:' .. h, 'x:' .. h, 'a:' .. h, 'u:' .. h, 'kt')
end

-- read_action reads an action's current operation from the action key's
-- value v: a.opID, a.hint, a.prev, and a.f (read_operation).
local function read_action(a, v)
  a.opID, a.hint, a.prev = current_of(v)
  if not a.opID then return end
  a.f = read_operation(a.base .. 'op:' .. a.opID, a.hint)
end

-- revisions_of returns, for operation op (key) that read_operation read
-- as f with hint h, its current revision's t, s, x and a, then t, s, x, a
-- and u of each revision in al (its approved ones, first recorded
-- first): from that read when the hint was right and names every
-- revision needed, else with one more HMGET.
local function revisions_of(f, h, op, al)
  local cur = f[4] or ''
  if h == cur and (#al == 0 or (#al == 1 and al[1] == cur)) then
    return {f[7], f[8], f[9], f[10], f[7], f[8], f[9], f[10], f[11]}
  end
  local fields = {'t:' .. cur, 's:' .. cur, 'x:' .. cur, 'a:' .. cur}
  for _, r in ipairs(al) do
    local n = #fields
    fields[n + 1], fields[n + 2], fields[n + 3], fields[n + 4], fields[n + 5] =
      't:' .. r, 's:' .. r, 'x:' .. r, 'a:' .. r, 'u:' .. r
  end
  return redis.call('HMGET', op, unpack(fields))
end

-- computed_of reads what follows a seed's 36 random characters: '.' and
-- the operation_id the caller computes (not stored: the ref carries it),
-- or '!' and that operation_id to store the operation under
-- (computed.Crosses); '' when the caller can't compute one. storeAs is
-- true for '!'. (Plain finds: a pattern would scan the seed at every
-- position.)
local function computed_of(seed)
  local i = string.find(seed, '.', 1, true) or string.find(seed, '!', 1, true)
  if not i then return '', false end
  return string.sub(seed, i + 1), string.sub(seed, i, i) == '!'
end

-- request reads issue.lua's ARGV (KEYS[1] is the action key
-- "<base>act:<action digest>"; take.lua makes the same table from its
-- own, only when it issues). The table names every field the steps set
-- later (false until then), so that it is made at its full size once
-- rather than grown (about 0.7 µs of server CPU per step).
local function request(KEYS, ARGV)
  local base, akey = string.match(KEYS[1], '^(.*)act:([^:]*)$')
  local compute, storeAs = computed_of(ARGV[8])
  return {
    base = base, actKey = KEYS[1], akey = akey,
    acct = ARGV[1], terms = ARGV[2], summary = ARGV[3], fixed = ARGV[4],
    x = ARGV[5], half = ARGV[6], now = ARGV[7], seed = ARGV[8], compute = compute, storeAs = storeAs,
    agent = ARGV[9], user = ARGV[10], maxOpen = ARGV[11], xttl = ARGV[12],
    agentKey = false, maxAgent = false, agentMember = false,
    opID = false, hint = '', prev = '', f = false, c = false,
  }
end

-- The audit log (store.Entry, audit.go): each operation's entries are one
-- string, "<base>lg:<operation_id>" in its slot, which the step that
-- commits what an entry records rewrites in the same script (GET, then
-- SET: Redis keeps a string that APPEND grew at up to twice its size).
-- Its first line is '1:' and the log's keep-until, then one line per
-- entry, in the order written, of 8 fields separated by tabs:
--   1 what (audit.go entryCodes)
--   2 at
--   3 the approval's used-at ('=': at)
--   4 kind, Session and note (reason or by), separated by \31
--   5 web server, agent, user and account, separated by \31
--   6 revision, summary and expires_at, separated by \31; expires_at '-'
--     when it is the seconds the revision's name starts with
--     (revision_name)
--   7 terms digest (terms_field while the step knows only the terms:
--     the claim, which knows their digest, puts it in their place)
--   8 the approval (approval_field; its recorded_at left out when it is at)
-- A field is '' when it says what the entry before says, '\' when it is
-- '' after one that was not, and the fields '' ends a line with are left
-- out: what an operation's entries share is kept once. A string holding
-- a backslash, a tab, a newline or \31 is kept with them escaped (esc),
-- so that no field holds a tab, a newline or \31. A decline
-- or a claim is refused once the log holds AUDIT_REFUSE entries
-- (storekit.EntriesBeforeRefusal), which leaves room for all that may
-- follow within 64 (webkit/RULES.md "Bounded work").
--
-- Cost: a step's entry is a GET and a SET (with the log's TTL when it is
-- kept longer), and Lua work, measured in instructions (callgrind on
-- redis-server): each string function call costs about a thousand, a
-- character class scanned over a string about 150 a character, so the
-- code below calls few and scans with plain finds; Record's caller
-- composes the first line of a computed operation's log (audit.go
-- firstLine), and a claim keeps in its operation what its entry said, so
-- that Finish doesn't read the log line by line (log_prev).
local AUDIT_REFUSE = 44

-- esc is s as a string of the log: itself, or, when it holds a backslash,
-- a tab, a newline or \31, with each of them escaped (\\, \t, \n, \s),
-- byte for byte (audit.go escapeField, unescapeField).
local ESCAPES = {['\\'] = '\\\\', ['\t'] = '\\t', ['\n'] = '\\n', ['\31'] = '\\s'}
local function esc(s)
  if not s then return '' end
  if not (string.find(s, '\\', 1, true) or string.find(s, '\t', 1, true) or string.find(s, '\n', 1, true) or
      string.find(s, '\31', 1, true)) then
    return s
  end
  return (string.gsub(s, '[\\\t\n\31]', ESCAPES))
end

-- terms_field is terms t where the log keeps a terms digest that the step
-- doesn't know (audit.go digestOfField): '=' and t, or, when t holds a
-- tab or a newline (canonical terms don't), '!' and t escaped (esc).
local function terms_field(t)
  if not (string.find(t, '\t', 1, true) or string.find(t, '\n', 1, true)) then return '=' .. t end
  return '!' .. esc(t)
end

-- approval_field is a stored approval (redisstore.go encodeApproval's
-- JSON) as the log keeps it: 'u' or 'a' for its approver, then ',p'
-- approved_at, ',i' input_type, ',r' reference and ',t' recorded_at, as
-- the JSON has them (a member's name can't be inside a JSON string, whose
-- quotes are escaped); the JSON itself when it has another shape.
-- audit.go approvalField makes the same.
local APPROVAL_MEMBERS = {{',"approved_at":', ',p'}, {',"input_type":', ',i'}, {',"reference":', ',r'}}
local function approval_field(j)
  if not j or j == '' then return '' end
  local c, i
  if string.sub(j, 1, 18) == '{"approver":"user"' then
    c, i = 'u', 19
  elseif string.sub(j, 1, 19) == '{"approver":"agent"' then
    c, i = 'a', 20
  else
    return j
  end
  if string.sub(j, -1) ~= '}' then return j end
  if string.sub(j, i, i + 14) ~= ',"recorded_at":' then
    for _, m in ipairs(APPROVAL_MEMBERS) do
      if string.sub(j, i, i + #m[1] - 1) == m[1] then
        -- Up to the next member (its value has no ,": quotes in a string
        -- are escaped).
        local v = i + #m[1]
        local nxt = string.find(j, ',"', v, true) or #j
        c, i = c .. m[2] .. string.sub(j, v, nxt - 1), nxt
      end
    end
    if string.sub(j, i, i + 14) ~= ',"recorded_at":' then return j end
  end
  local rec = string.sub(j, i + 15, #j - 1)
  if not string.find(rec, '^%-?%d+$') then return j end
  return c .. ',t' .. rec
end

-- LOG_NONE is the fields nothing says yet, before a log's first entry.
local LOG_NONE = {'', '', '', '', '', '', '', ''}

-- log_read reads a log's string s: its keep-until, where its entries
-- start (its first newline), how many it holds, the fields of the latest
-- as the lines before resolve them (audit.go resolveLine), and where the
-- terms digest field the latest says was written. nil when s is no log
-- of this format.
local function log_read(s)
  local nl = string.find(s, '\n', 1, true)
  if not nl or string.sub(s, 1, 2) ~= '1:' then return nil end
  local st = {'', '', '', '', '', '', '', ''}
  local n, d1, d2, i, len = 0, nil, nil, nl + 1, #s
  while i <= len do
    local e = string.find(s, '\n', i, true) or len + 1
    local j, f = i, 1
    while f <= 8 and j < e do
      local t = string.find(s, '\t', j, true)
      if not t or t > e then t = e end
      if t > j then
        local v = string.sub(s, j, t - 1)
        if v == '\\' then
          v = ''
        elseif f == 3 then
          if v == '=' then v = st[2] end
        elseif f == 7 then
          d1, d2 = j, t - 1
        elseif f == 8 then
          local b = string.byte(v)
          if (b == 117 or b == 97) and not string.find(v, ',t%-?%d+$') then v = v .. ',t' .. st[2] end
        end
        st[f] = v
      end
      j, f = t + 1, f + 1
    end
    n, i = n + 1, e + 1
  end
  return string.sub(s, 3, nl - 1), nl, n, st, d1, d2
end

-- log_write appends an entry to the log key log, in the same step as what
-- it records, and keeps the log until the later of keepAu (now plus the
-- audit retention; keepTTL is its TTL in ms, or nil) and k (the
-- operation's keep-until at this step), and no less long than it was
-- kept. A log forgotten by now (whether or not its TTL has fired) is begun
-- anew. The entry is e: the caller's head (audit.go entryHeadOf: fields
-- 1, 2, '' and 4-5 as a line has them) and what the step knows (e.u the
-- approval's used-at, e.rev, e.s and e.x the revision, its summary and
-- expires_at, e.d the terms digest field, e.ap the stored approval, e.acct
-- the operation's account, '' or nil when the head says it). alias, when
-- given, is {terms_field(terms), their digest}: a digest field that holds
-- those terms becomes the digest. With refuse (a decline, a claim) it
-- writes nothing and returns false when the log holds AUDIT_REFUSE
-- entries: call it before the step's writes. With none, the caller knows
-- there is no log yet (record.lua's EXISTS), and it is not read. prev,
-- when given, is what the log's latest entry says as the operation's hash
-- keeps it (log_prev): when the log is as long as then, it is not read
-- line by line. It returns true, the log's new length, and its entry's
-- fields 4-5 and 7 as log_prev keeps them.
local function log_write(log, e, keepAu, keepTTL, k, now, refuse, alias, none, prev)
  local s = nil
  if not none then s = redis.call('GET', log) end
  local keep, body, n, st, d1, d2, stco
  local same = false -- the revision and approval are the latest entry's
  if s and prev and prev.len == tostring(#s) and string.sub(s, 1, 2) == '1:' then
    body = string.find(s, '\n', 1, true)
    keep, n, stco, same = string.sub(s, 3, body - 1), 1, prev.co, true
    st = {'', prev.at, prev.used, nil, nil, nil, prev.d, nil}
  elseif s then
    keep, body, n, st, d1, d2 = log_read(s)
    if keep then stco = st[4] .. '\t' .. st[5] end
  end
  if not keep or cmp(now, keep) > 0 then
    s, n, st, stco, same = nil, 0, LOG_NONE, '\t', false
  end
  if refuse and n >= AUDIT_REFUSE then return false end
  if alias and d1 and st[7] == alias[1] then
    s = string.sub(s, 1, d1 - 1) .. alias[2] .. string.sub(s, d2 + 1)
    st = {st[1], st[2], st[3], st[4], st[5], st[6], alias[2], st[8]}
  end
  -- The fields (the head's in one piece, then the step's), and what the
  -- line says of each (w).
  local head = e.head
  local a = string.find(head, '\t', 1, true)
  local b = string.find(head, '\t', a + 1, true)
  local at = string.sub(head, a + 1, b - 1)
  local w = {string.sub(head, 1, a - 1), '', '', '', '', '', '', ''}
  if at ~= st[2] then w[2] = at end
  local u = e.u or ''
  if u ~= st[3] then
    if u == '' then w[3] = '\\' elseif u == at then w[3] = '=' else w[3] = u end
  end
  -- Context and owner: the head's, in one piece when neither changed.
  local co = string.sub(head, b + 2)
  if e.acct or co ~= stco then
    local c = string.find(co, '\t', 1, true)
    local ctx, owner = string.sub(co, 1, c - 1), string.sub(co, c + 1)
    if e.acct and e.acct ~= '' then
      local i = #owner
      while i > 0 and string.byte(owner, i) ~= 31 do i = i - 1 end
      owner = string.sub(owner, 1, i) .. esc(e.acct)
      co = ctx .. '\t' .. owner
    end
    local pc = string.find(stco, '\t', 1, true)
    if ctx ~= string.sub(stco, 1, pc - 1) then w[4] = ctx end
    if owner ~= string.sub(stco, pc + 1) then w[5] = owner end
  end
  -- The revision: its name, summary and expires_at, escaped only when
  -- they are not the entry before's (strings with no backslash equal to
  -- their field are as they were, escaped or not).
  local rev, sum, x = e.rev or '', e.s or '', e.x or ''
  if not same then
    if (string.match(rev, '^(%-?%d+)%-') or '') .. '000000000' == x then x = '-' end
    local r = rev .. '\31' .. sum .. '\31' .. x
    if r ~= st[6] or string.find(sum, '\\', 1, true) or string.find(rev, '\\', 1, true) then
      r = esc(rev) .. '\31' .. esc(sum) .. '\31' .. x
      if r ~= st[6] then w[6] = r end
    end
  end
  local d = e.d or ''
  if d ~= st[7] then
    if d == '' then w[7] = '\\' else w[7] = d end
  end
  local ap = ''
  if not same then ap = approval_field(e.ap) end
  if not same and ap ~= st[8] then
    local c = string.byte(ap)
    if ap == '' then
      w[8] = '\\'
    elseif (c == 117 or c == 97) and string.sub(ap, -#at - 2) == ',t' .. at then
      w[8] = string.sub(ap, 1, #ap - #at - 2)
    else
      w[8] = ap
    end
  end
  local last = 8
  while last > 1 and w[last] == '' do last = last - 1 end
  local line = table.concat(w, '\t', 1, last) .. '\n'
  local want = later(keepAu, k)
  local t = keepTTL
  if want ~= keepAu or not t then t = ttl(want, now) end
  local v
  if not s then
    v = '1:' .. want .. '\n' .. line
    redis.call('SET', log, v, 'PX', t)
  elseif cmp(want, keep) > 0 then
    -- Kept longer: its TTL is set anew for the later keep-until (one
    -- record's, which only grows: within the minute of grace, GRACE_MS,
    -- whichever web server's clock set the TTL before).
    v = '1:' .. want .. string.sub(s, body) .. line
    redis.call('SET', log, v, 'PX', t)
  else
    v = '1:' .. keep .. string.sub(s, body) .. line
    redis.call('SET', log, v, 'KEEPTTL')
  end
  return true, #v, co, d
end

-- log_prev is log_write's prev as an operation's hash keeps it while it
-- is performing: a claim and an unknown outcome keep there what their
-- entry said, the log's length after it ('ll'), its fields 4-5 ('lh')
-- and 7 ('ld'), and its at and used-at ('la', 'lu'; a claim's are its
-- claimed-at, 'pa'); its revision and approval are the claimed ones.
-- They go with the claim (unclaim, finish.lua). f holds them in that
-- order from i; nil when they are not kept.
local function log_prev(f, i, pa)
  if not f[i] or not f[i + 1] or not f[i + 2] then return nil end
  return {len = f[i], co = f[i + 1], d = f[i + 2], at = f[i + 3] or pa, used = f[i + 4] or pa}
end

-- entry_of is an entry for log_write: the caller's head, and what the
-- step knows: the approval's used-at u, the revision rev, its summary s
-- and expires_at x, the terms digest d ('' when the caller doesn't know
-- the terms: then terms_field of the terms t), the stored approval ap,
-- and the operation's account acct ('' or nil when the caller's head
-- says it).
local function entry_of(head, u, rev, s, x, d, t, ap, acct)
  if d == '' and t then d = terms_field(t) end
  return {head = head, u = u, rev = rev, s = s, x = x, d = d, ap = ap, acct = acct}
end

-- audit appends an entry to operation opID's log (log_write): au is the
-- caller's three arguments (the entry's head; the terms' digest, '' when
-- the caller doesn't know the terms; now plus the audit retention), then
-- what the step knows (entry_of), k the operation's keep-until, and refuse
-- and none as log_write's.
local function audit(base, opID, au, rev, summary, x, terms, approval, used, k, now, refuse, acct, none)
  return log_write(base .. 'lg:' .. opID, entry_of(au[1], used, rev, summary, x, au[2], terms, approval, acct),
    au[3], nil, k, now, refuse, nil, none)
end

-- audit_unclaim writes the entry of a claim undone: by its holder
-- (release.lua), or unstarted, by the next request or by Performing
-- (take.lua, tidy.lua). Call it before unclaim, which drops the used-at.
-- The account is the operation's (tidy's caller doesn't know it).
local function audit_unclaim(base, op, opID, ap, k, now, au)
  local e = redis.call('HMGET', op, 't:' .. ap, 's:' .. ap, 'x:' .. ap, 'a:' .. ap, 'u:' .. ap, 'acct')
  audit(base, opID, au, ap, e[2], e[3], e[1], e[4], e[5], k, now, false, e[6])
end

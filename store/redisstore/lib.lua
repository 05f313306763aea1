-- lib.lua: what every script shares. Each script is this file followed by its
-- own, so that every state change is one atomic EVALSHA (webkit/RULES.md "The store").
--
-- Times are the caller's clock as Unix nanoseconds in decimal strings, never
-- Redis TIME, so every web server judges expiry alike (store package doc).
-- They are compared exactly as strings (cmp); only TTLs, which merely collect
-- garbage, are computed with (inexact) Lua numbers.
--
-- Every key a script touches is "<prefix>{<slot>}:..." with one hash tag, so
-- the keys it builds from ARGV (an operation found through the action key, the
-- approvals of an operation's action) are in the slot of its declared KEYS:
-- the scripts run unchanged on Redis, Redis Cluster and miniredis.

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

-- int formats a whole number for redis.call (gopher-lua and Lua 5.1 would
-- otherwise be free to print it with an exponent).
local function int(n)
  return string.format('%d', n)
end

-- ttl_ms is the TTL that keeps a key until untilNs (plus the grace).
local function ttl_ms(untilNs, nowNs)
  local ms = math.floor(((tonumber(untilNs) or 0) - (tonumber(nowNs) or 0)) / 1e6)
  if ms < 0 then ms = 0 end
  return ms + GRACE_MS
end

-- keep makes key live at least ms more milliseconds; it never shortens a TTL,
-- so one record's needs never cut another's (W102, W137, W138).
local function keep(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, int(ms))
  end
end

local function words(s)
  local out = {}
  if s then
    for w in string.gmatch(s, '%S+') do out[#out + 1] = w end
  end
  return out
end

local function without(list, v)
  local out = {}
  for _, w in ipairs(list) do
    if w ~= v then out[#out + 1] = w end
  end
  return out
end

-- gone reports whether an operation is unknown or forgotten by the caller's
-- clock: past its keep-until k, it is gone whether or not its TTL has fired
-- yet, so answers never depend on when Redis collects it.
local function gone(k, now)
  return not k or cmp(now, k) > 0
end

-- keep_until makes op remembered at least until untilNs (field k, the
-- caller's clock) and its TTL at least that long (W102, W137, W138).
-- An open operation's entry in its owner's open set follows k, so that the
-- set counts exactly the operations not yet forgotten.
local function keep_until(op, untilNs, now)
  local k = redis.call('HGET', op, 'k')
  if not k or cmp(untilNs, k) > 0 then
    k = untilNs
    redis.call('HSET', op, 'k', k)
    local b, id = string.match(op, '^(.*)op:([^:]*)$')
    if b then
      local open = b .. 'open'
      redis.call('ZADD', open, 'XX', 'GT', k, id)
      keep(open, ttl_ms(k, now))
    end
  end
  keep(op, ttl_ms(k, now))
end

-- apr_key is the set of an action's live approvals of one terms (their
-- SHA-1, as Go's store computes it for Take's KEYS), first recorded first:
-- Take reads only the approvals that can match its request (webkit/RULES.md
-- "Bounded work").
local function apr_key(base, akey, terms)
  return base .. 'apr:' .. akey .. ':' .. redis.sha1hex(terms)
end

-- add_revision makes rev the operation's current revision. Beyond
-- MAX_REVISIONS it drops the oldest never-approved one; approved ones are
-- kept for check 3 and "already recorded" (§6, §7).
local function add_revision(op, opID, rev, terms, summary, x)
  local revs = words(redis.call('HGET', op, 'order'))
  revs[#revs + 1] = rev
  if #revs > MAX_REVISIONS then
    for i = 1, #revs - 1 do
      local r = revs[i]
      if redis.call('HEXISTS', op, 'a:' .. r) == 0 then
        table.remove(revs, i)
        redis.call('HDEL', op, 't:' .. r, 's:' .. r, 'x:' .. r)
        break
      end
    end
  end
  redis.call('HSET', op, 't:' .. rev, terms, 's:' .. rev, summary, 'x:' .. rev, x,
    'cur', rev, 'order', table.concat(revs, ' '))
end

-- revision_name names a fresh revision expiring at x (Unix ns) as
-- store.NewRevision does: its Unix seconds, '-', the random suffix the
-- caller made.
local function revision_name(x, suffix)
  local sec = '0'
  if #x > 9 then sec = string.sub(x, 1, #x - 9) end
  return sec .. '-' .. suffix
end

-- issue returns the operation for an action: {opID, revision, summary,
-- terms, expires}. The action's current operation while it is open (W19,
-- W20), else newOp (W141); its current revision while it is reusable, else
-- newRev (W24, W25, W36).
--
-- fixed is the action's ExpiresAt ('' for none); newX the new revision's
-- expires_at; half the least expires_at a reused revision may have (W39);
-- agent and user the owner's, kept so that Performing can name the owner;
-- maxOpen the owner's cap of open operations. Returns nil when a new
-- operation would pass it, else {opID, revision, summary, terms, expires}
-- and, for a new operation, 'new'.
local function issue(base, actKey, acct, akey, terms, summary, fixed, newX, half, now, newOp, newRev, agent, user, maxOpen)
  local opID = redis.call('GET', actKey)
  local op
  local open = false
  if opID then
    op = base .. 'op:' .. opID
    local f = redis.call('HMGET', op, 'state', 'acct', 'akey', 'cur', 'k')
    if f[1] == 'open' and f[2] == acct and f[3] == akey and not gone(f[5], now) then
      open = true
      local cur = f[4]
      if cur then
        local r = redis.call('HMGET', op, 't:' .. cur, 's:' .. cur, 'x:' .. cur, 'a:' .. cur)
        local x = r[3]
        -- Reusable: same terms (W24), not expired, the same fixed
        -- expires_at (W25) or half its lifetime left (W39), and never
        -- approved, so that an operation whose approval was used up
        -- without performing can be approved again (W98).
        if r[1] == terms and x and not r[4] and cmp(now, x) <= 0 and
            ((fixed == '' and cmp(x, half) >= 0) or (fixed ~= '' and x == fixed)) then
          return {opID, cur, r[2] or '', terms, x}
        end
      end
    end
  end
  if not open then
    -- The owner's open operations: forgotten ones leave by their score
    -- (their k), performed ones when performed.
    local openSet = base .. 'open'
    redis.call('ZREMRANGEBYSCORE', openSet, '-inf', '(' .. now)
    if redis.call('ZCARD', openSet) >= tonumber(maxOpen) then
      return nil
    end
    opID = newOp
    op = base .. 'op:' .. opID
    redis.call('HSET', op, 'acct', acct, 'akey', akey, 'state', 'open', 'ag', agent, 'us', user)
    redis.call('ZADD', openSet, newX, opID)
    redis.call('SET', actKey, opID)
  end
  add_revision(op, opID, newRev, terms, summary, newX)
  keep_until(op, newX, now)
  -- The action key lives as long as its operation, so a repeated request
  -- keeps its operation_id (W19).
  keep(actKey, redis.call('PTTL', op))
  -- A sixth element 'new' says the operation is new, for the agent's cap
  -- (agent.lua).
  local new = ''
  if not open then new = 'new' end
  return {opID, newRev, summary, terms, newX, new}
end

-- finish.lua (after lib.lua): Store.Finish (§7), and Reconciler.Resolve.
-- KEYS: the operation key ("<base>op:<operation_id>"), the index of
--       performing operations of its hash slot (take.lua), and on a single
--       Redis the agent's count of open operations (agent.lua).
-- ARGV: 1 claim token, 2 outcome ('done', 'notdone', 'unknown'), 3 now,
--       4 now + retention, 5 random suffix of a fresh revision, 6 '1' to
--       resolve (whoever holds the claim) else '0', 7 the account (to
--       resolve), 8 the TTL in ms that keeps a key until 4, 9-11 the
--       audit entry's (lib.lua audit), and with the agent's count: 12 its
--       members' prefix ("<slot> ").
-- Returns 1, or 0 when the claim is no longer held (not performing).
local op = KEYS[1]
local token, outcome, now, retained = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local base, opID = string.match(op, '^(.*)op:([^:]*)$')
local f = redis.call('HMGET', op, 'state', 'claim', 'ap', 'akey', 'al', 'k', 'cur', 'acct', 'order', 'ka', 'pa', 'c', 'fu')
local k = f[6]
if f[1] ~= 'performing' or gone(k, now) then
  return 0
end
if ARGV[6] == '1' then
  if f[8] ~= ARGV[7] then return 0 end
elseif not f[2] or f[2] ~= token then
  return 0
end
local ap, cur = f[3], f[7]
-- The entry's: the claimed revision and its approval, read before they go.
-- An unknown outcome reported again changes nothing and writes none.
local e = nil
if ap and not (outcome == 'unknown' and f[13]) then
  e = redis.call('HMGET', op, 't:' .. ap, 's:' .. ap, 'x:' .. ap, 'a:' .. ap, 'u:' .. ap)
end
if outcome == 'done' then
  -- Remembered until the approved revision's expires_at (k is at least
  -- every revision's), and for the retention at least (W137).
  k = later(retained, k)
  -- Performed, it keeps only what its status and §7 need: its state, its
  -- account (check 1), its revisions' names (a ref it returned is found;
  -- any other is not, W74), k, and pa when it was computed. Its terms, summaries and approvals go,
  -- and the hash is written anew so that Redis keeps it compact.
  local fields = {'state', 'performed', 'acct', f[8] or '', 'cur', cur or '', 'k', k}
  -- A computed one (c) keeps when it was claimed: a computed ref of its
  -- action handed out before then never stores a second operation (lib.lua
  -- neighbours_allow).
  if f[12] and f[11] then fields[#fields + 1] = 'pa'; fields[#fields + 1] = f[11] end
  for _, r in ipairs(words(f[9])) do
    fields[#fields + 1] = 't:' .. r
    fields[#fields + 1] = ''
  end
  -- The claim's token is never asked about again, and the action's next
  -- request gets a new operation (W141): neither key is needed. One DEL
  -- drops them with the operation's old hash. The action key of an
  -- operation marked ka (lib.lua issue) stays, naming it, as long as it
  -- is remembered.
  local gone_keys = {op}
  if f[2] then gone_keys[#gone_keys + 1] = base .. 'tok:' .. f[2] end
  local keep = nil
  if f[4] then
    local act = base .. 'act:' .. f[4]
    if current_of(redis.call('GET', act)) == opID then
      if f[10] then keep = act else gone_keys[#gone_keys + 1] = act end
    end
  end
  redis.call('DEL', unpack(gone_keys))
  redis.call('HSET', op, unpack(fields))
  local t = ARGV[8]
  if k ~= retained then t = ttl(k, now) end
  redis.call('PEXPIRE', op, t)
  if keep then extend(keep, t) end
  -- Its claim took it off its owner's count of open operations, and its
  -- agent's on this server (take.lua); a claim made by an earlier version
  -- did not.
  redis.call('ZREM', base .. 'open', opID)
  if KEYS[3] then redis.call('ZREM', KEYS[3], ARGV[12] .. opID) end
  redis.call('ZREM', KEYS[2], op)
elseif outcome == 'notdone' then
  -- W98: the operation waits again; its approval stays used up.
  redis.call('HSET', op, 'state', 'open')
  redis.call('HDEL', op, 'claim', 'ap', 'pa', 'fu', 'st')
  redis.call('ZREM', KEYS[2], op)
  -- W90, W122: the used-up revision can't be approved again, so the
  -- operation offers the same terms under a fresh revision with the same
  -- expires_at: Lookup then names a revision an approval can still use,
  -- and the next request with these terms reuses it.
  if ap and cur == ap then
    local r = redis.call('HMGET', op, 't:' .. ap, 's:' .. ap, 'x:' .. ap)
    if r[1] and r[3] and cmp(now, r[3]) <= 0 then
      add_revision(op, opID, base, nil, f[9], f[5], revision_name(r[3], ARGV[5]), r[1], r[2] or '', r[3], k, now)
    end
  end
  -- Open again, it counts among its owner's (and agent's) open
  -- operations until k.
  reopen(base, opID, k, now, KEYS[3], ARGV[12])
else
  -- W142, W138: still performing, and kept while it is; the claim stays
  -- held so that the outcome can be reported once known, but it can no
  -- longer be released: the action may have taken effect.
  local kk = later(retained, k)
  redis.call('HSET', op, 'fu', '1', 'k', kk)
  if kk ~= k then
    extend(op, ARGV[8])
    -- Listed by Performing as long as it is kept.
    extend(KEYS[2], ARGV[8])
    -- The action stays busy while it is (take.lua, W145).
    if f[4] then extend(base .. 'act:' .. f[4], ARGV[8]) end
  end
  k = kk
end
if e then audit(base, opID, {ARGV[9], ARGV[10], ARGV[11]}, ap, e[2], e[3], e[1], e[4], e[5], k, now) end
return 1

-- finish.lua (after lib.lua): Store.Finish (§7), and Reconciler.Resolve.
-- KEYS: 1 the operation key ("<base>op:<operation_id>"), 2 the index of
--       performing operations of its hash slot (take.lua), 3 its audit
--       log ("<base>log:<operation_id>", lib.lua audit), and on a single
--       Redis 4 the agent's count of open operations (agent.lua).
-- ARGV: 1 claim token ('' to resolve: whoever holds the claim), 2 outcome
--       ('done', 'notdone', 'unknown'), 3 now, 4 now + retention, 5 the
--       TTL in ms that keeps a key until 4, 6 base ("<prefix>{<slot>}:"),
--       7 the claimed revision ('' when not known), 8 the account (to
--       resolve), 9 random suffix of a fresh revision ('' unless
--       'notdone'), 10-12 the audit entry's head, terms digest ('' when
--       the caller doesn't know the terms) and now + audit retention
--       (lib.lua audit), 13 the TTL in ms that keeps a key until 12, 14
--       the answer to keep with a performed operation
--       (storedriver.WithAnswer: an API's or MCP server's first answer,
--       §7; '' for none), and with the agent's count: 15 its members'
--       prefix ("<slot> ").
-- Returns 1, or 0 when the claim is no longer held (not performing).
--
-- Cost (lib.lua): the caller names the keys it knows and the claimed
-- revision, read with the operation, in one HMGET, with only the fields
-- the outcome needs, and what its entry says of it.
local op, idx, log = KEYS[1], KEYS[2], KEYS[3]
local token, outcome, now, retained, base, rev = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[6], ARGV[7]
local opID = string.sub(op, #base + 4)
-- f: 1 state, 2 claim, 3 ap, 4 akey, 5 k, 6 cur, 7 acct, 8 order, 9 ka,
-- 10 pa, 11 c, 12 st, 13-17 what the claim's (or an unknown outcome's)
-- entry said (lib.lua log_prev), then the claimed revision's s, x, a and
-- u when it is named, then al and fu (from j) unless it is performed
-- (neither is needed then).
local f, j = nil, 22
if rev == '' then
  f = redis.call('HMGET', op, 'state', 'claim', 'ap', 'akey', 'k', 'cur', 'acct', 'order', 'ka', 'pa', 'c', 'st',
    'll', 'lh', 'ld', 'la', 'lu', 'al', 'fu')
  j = 18
elseif outcome == 'done' then
  f = redis.call('HMGET', op, 'state', 'claim', 'ap', 'akey', 'k', 'cur', 'acct', 'order', 'ka', 'pa', 'c', 'st',
    'll', 'lh', 'ld', 'la', 'lu', 's:' .. rev, 'x:' .. rev, 'a:' .. rev, 'u:' .. rev)
else
  f = redis.call('HMGET', op, 'state', 'claim', 'ap', 'akey', 'k', 'cur', 'acct', 'order', 'ka', 'pa', 'c', 'st',
    'll', 'lh', 'ld', 'la', 'lu', 's:' .. rev, 'x:' .. rev, 'a:' .. rev, 'u:' .. rev, 'al', 'fu')
end
local k = f[5]
if f[1] ~= 'performing' or gone(k, now) then
  return 0
end
if token == '' then
  if f[7] ~= ARGV[8] then return 0 end
elseif f[2] ~= token then
  return 0
end
local ap, cur, al, fu = f[3], f[6], f[j], f[j + 1]
-- The entry's: the claimed revision and its approval, read before they go,
-- as stored (whatever the caller's claim says of them). An unknown
-- outcome reported again changes nothing and writes none.
local e = nil
if ap and not (outcome == 'unknown' and fu) then
  if ap == rev then
    e = {f[18], f[19], f[20], f[21]}
  else
    e = redis.call('HMGET', op, 's:' .. ap, 'x:' .. ap, 'a:' .. ap, 'u:' .. ap)
  end
  -- Its terms, when the caller sent no digest of them.
  if ARGV[11] == '' then e[5] = redis.call('HGET', op, 't:' .. ap) end
end
if outcome == 'done' then
  -- Remembered until the approved revision's expires_at (k is at least
  -- every revision's), and for the retention at least (W137).
  k = later(retained, k)
  -- Performed, it keeps only what its status and §7 need: its state, its
  -- account (check 1), its revisions' names (a ref it returned is found;
  -- any other is not, W74), k, and pa when it was computed. Its terms, summaries and approvals go,
  -- and the hash is written anew so that Redis keeps it compact.
  local fields = {'state', 'performed', 'acct', f[7] or '', 'cur', cur or '', 'k', k}
  -- What an API or MCP server answered, for a retry with the same
  -- approval (§7 P90, M90).
  if ARGV[14] and ARGV[14] ~= '' then
    fields[#fields + 1] = 'ans'
    fields[#fields + 1] = ARGV[14]
  end
  -- A computed one (c) keeps when it was claimed: a computed ref of its
  -- action handed out before then never stores a second operation (lib.lua
  -- neighbour_allows).
  if f[11] and f[10] then
    fields[#fields + 1] = 'pa'
    fields[#fields + 1] = f[10]
  end
  if f[8] then
    for r in string.gmatch(f[8], '%S+') do
      fields[#fields + 1] = 't:' .. r
      fields[#fields + 1] = ''
    end
  end
  -- The claim's token is never asked about again, and the action's next
  -- request gets a new operation (W141): neither key is needed. One DEL
  -- drops them with the operation's old hash. The action key of an
  -- operation marked ka (lib.lua issue) stays, naming it, as long as it
  -- is remembered.
  local tok = op
  if f[2] then tok = base .. 'tok:' .. f[2] end
  local keep = nil
  local act = f[4] and base .. 'act:' .. f[4]
  if act and names(redis.call('GET', act), opID) then
    if f[9] then
      keep = act
      redis.call('DEL', op, tok)
    else
      redis.call('DEL', op, tok, act)
    end
  else
    redis.call('DEL', op, tok)
  end
  redis.call('HSET', op, unpack(fields))
  local t = ARGV[5]
  if k ~= retained then t = ttl(k, now) end
  redis.call('PEXPIRE', op, t)
  if keep then extend(keep, t) end
  -- Its claim took it off its owner's count of open operations, and its
  -- agent's on this server (take.lua); a claim made by an earlier version
  -- (one that made no start mark, st) did not.
  if not f[12] then redis.call('ZREM', base .. 'open', opID) end
  if KEYS[4] then redis.call('ZREM', KEYS[4], ARGV[15] .. opID) end
  redis.call('ZREM', idx, op)
elseif outcome == 'notdone' then
  -- W98: the operation waits again; its approval stays used up.
  redis.call('HSET', op, 'state', 'open')
  redis.call('HDEL', op, 'claim', 'ap', 'pa', 'fu', 'st', 'll', 'lh', 'ld', 'la', 'lu')
  redis.call('ZREM', idx, op)
  -- W90, W122: the used-up revision can't be approved again, so the
  -- operation offers the same terms under a fresh revision with the same
  -- expires_at: Lookup then names a revision an approval can still use,
  -- and the next request with these terms reuses it.
  if ap and cur == ap then
    local r = redis.call('HMGET', op, 't:' .. ap, 's:' .. ap, 'x:' .. ap)
    if r[1] and r[3] and cmp(now, r[3]) <= 0 then
      add_revision(op, opID, base, nil, f[8], al, revision_name(r[3], ARGV[9]) .. via_of(ap), r[1], r[2] or '', r[3], k, now)
    end
  end
  -- Open again, it counts among its owner's (and agent's) open
  -- operations until k.
  reopen(base, opID, k, now, KEYS[4], ARGV[15])
else
  -- W142, W138: still performing, and kept while it is; the claim stays
  -- held so that the outcome can be reported once known, but it can no
  -- longer be released: the action may have taken effect.
  local kk = later(retained, k)
  redis.call('HSET', op, 'fu', '1', 'k', kk)
  if kk ~= k then
    extend(op, ARGV[5])
    -- Listed by Performing as long as it is kept.
    extend(idx, ARGV[5])
    -- The action stays busy while it is (take.lua, W145).
    if f[4] then extend(base .. 'act:' .. f[4], ARGV[5]) end
  end
  k = kk
end
if e then
  -- The latest entry is most often the claim's (or an unknown outcome's),
  -- which the operation kept: the log needn't be read line by line.
  local ok, ll, lh, ld = log_write(log, entry_of(ARGV[10], e[4], ap, e[1], e[2], ARGV[11], e[5], e[3]), ARGV[12], ARGV[13], k,
    now, false, nil, false, log_prev(f, 13, f[10]))
  if outcome == 'unknown' then
    -- Still performing: what this entry said, for the next (log_prev).
    redis.call('HSET', op, 'll', ll, 'lh', lh, 'ld', ld, 'la', now, 'lu', e[4] or '')
  end
end
return 1

-- release.lua (after lib.lua): Store.Release (W144, webkit/RULES.md "Claims are
-- never stranded").
-- KEYS: the claim token key ("<base>tok:<token>"), the index of performing
--       operations of its hash slot (take.lua), and on a single Redis the
--       agent's count of open operations (agent.lua).
-- Its holder releases a claim whether or not it was marked started
-- (start.lua): the holder calls Release only when it did not run the
-- handler (its start mark's confirmation failed, or its reply was lost).
-- ARGV: 1 claim token, 2 now, 3 the token key's TTL in ms, 4 now + that
--       TTL (when the token is forgotten, token_of), 5-7 the audit entry's
--       (lib.lua audit), and with the agent's count: 8 its members' prefix
--       ("<slot> ").
-- Returns 1 when a claim was undone, else 0.
local tokKey, token, now, tokTTL, tokUntil = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local base = string.sub(tokKey, 1, #tokKey - #token - 4)
local tk = token_of(redis.call('GET', tokKey), now)
-- Whatever happens next, a Take with this token that runs later (its
-- reply was lost, or it ran after the caller gave up) claims nothing.
redis.call('SET', tokKey, 'r ' .. tokUntil, 'PX', tokTTL)
if not tk or tk == 'r' then return 0 end
local op = base .. 'op:' .. tk
local f = redis.call('HMGET', op, 'state', 'claim', 'ap', 'fu', 'k')
-- Only a claim still held by this token, whose outcome nobody reported:
-- after Finish(Unknown) the action may have taken effect.
if f[1] ~= 'performing' or f[2] ~= token or not f[3] or f[4] or gone(f[5], now) then
  return 0
end
-- The approval applies again, in its first-recorded place (W95): the
-- operation's approvals keep the order they were recorded in.
audit_unclaim(base, op, tk, f[3], f[5], now, {ARGV[5], ARGV[6], ARGV[7]})
unclaim(base, op, tk, nil, f[3], f[5], now, KEYS[2], nil, nil, KEYS[3], ARGV[8])
return 1

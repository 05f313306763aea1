-- tidy.lua (after lib.lua): Store.Performing's one write, per operation its
-- index names (reconcile.go).
-- KEYS: the index of performing operations of a hash slot (take.lua), an
--       operation key it names, and on a single Redis the agent's count of
--       open operations (agent.lua).
-- ARGV: 1 now, 2 the instant before which a claim never marked started
--       is undone, 3 the token key's TTL in ms, 4 now + that TTL, 5-7 the
--       audit entry of a claim undone (lib.lua audit), and with the
--       agent's count: 8 its members' prefix ("<slot> ").
-- Returns 'pruned' when the operation is not performing (or forgotten):
-- it leaves the index; 'released' when its claim was never marked started
-- (start.lua) and made before ARGV[2]: no handler runs or will, so it is
-- undone (unclaim) and its approval applies again; else 'kept'.
local idx, op, now = KEYS[1], KEYS[2], ARGV[1]
local f = redis.call('HMGET', op, 'state', 'k', 'st', 'fu', 'pa', 'claim', 'ap')
if f[1] ~= 'performing' or gone(f[2], now) then
  redis.call('ZREM', idx, op)
  return 'pruned'
end
if f[3] == '0' and not f[4] and f[5] and f[7] and cmp(f[5], ARGV[2]) < 0 then
  local base, opID = string.match(op, '^(.*)op:([^:]*)$')
  audit_unclaim(base, op, opID, f[7], f[2], now, {ARGV[5], ARGV[6], ARGV[7]})
  unclaim(base, op, opID, f[6], f[7], f[2], now, idx, ARGV[3], ARGV[4], KEYS[3], ARGV[8])
  return 'released'
end
return 'kept'

-- agent.lua (after lib.lua): the agent's cap of open operations
-- (store.DefaultMaxOpenPerAgent; webkit/RULES.md "Bounded work"). An
-- agent's Users are in many Cluster slots, so its count has a key (and a
-- slot) of its own; on a Cluster it is kept by this second step, run only
-- when Take or Issue made a new operation (on a single Redis, Take and
-- Issue count it themselves: new_operation in lib.lua).
-- KEYS: the agent's set. ARGV: member ("<slot> <operation_id>"), the
-- operation's first expires_at, now, the cap.
-- Returns 1 when counted, 0 when the cap is reached.
local set = KEYS[1]
-- An operation leaves the count when it is performed (Finish pipelines a
-- ZREM beside its script: this key is in another slot) or when its first
-- revision expires, whichever comes first. On a Cluster that is an
-- approximation: an operation whose later revisions outlive its first
-- leaves the count early. (On a single Redis the count is exact: the
-- steps keep each operation's score at its keep-until, as the owner's.)
local n = under_cap(set, ARGV[4], ARGV[3])
if not n then
  return 0
end
add_open(set, n, ARGV[2], ARGV[1], ttl(ARGV[2], ARGV[3]))
return 1

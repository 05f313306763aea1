-- issue.lua (after lib.lua): Store.Issue.
-- KEYS: the action key ("<base>act:<action digest>"), and on a single
--       Redis the agent's count of open operations (agent.lua).
-- ARGV: 1 account, 2 terms, 3 summary, 4 fixed expires_at or '', 5 a fresh
--       revision's expires_at, 6 the least expires_at a reused revision may
--       have, 7 now, 8 seed (36 random characters: a new operation_id's 20,
--       then a revision's 16; then '.' and an operation_id to compute,
--       lib.lua issue),
--       9 agent, 10 user, 11 the owner's cap of open
--       operations, 12 the TTL in ms that keeps a key until 5, and with
--       the agent's count: 13 the agent's cap, 14 its members' prefix
--       ("<slot> ").
-- Returns {opID, revision, summary, terms, expires[, 'new']} or {'limited'}.
local a = request(KEYS, ARGV)
a.agentKey, a.maxAgent, a.agentMember = KEYS[2], ARGV[13], ARGV[14]
read_action(a, redis.call('GET', a.actKey))
if a.f and (a.f[1] == 'open' or a.f[1] == 'performing') then
  a.c = revisions_of(a.f, a.hint, a.base .. "op:" .. a.opID, {})
end
local r = issue(a)
if not r then return {'limited'} end
return r

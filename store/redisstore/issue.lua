-- issue.lua (after lib.lua): Store.Issue.
-- KEYS: action key.
-- ARGV: base, account, action digest, terms, summary, fixed expires_at or '',
--       new expires_at, least reusable expires_at, now, new operation_id,
--       new revision, agent, user, the owner's cap of open operations.
-- Returns {opID, revision, summary, terms, expires} or {'limited'}.
local r = issue(ARGV[1], KEYS[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6],
  ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12], ARGV[13], ARGV[14])
if not r then return {'limited'} end
return r

-- undo.lua (after lib.lua): forgets an operation Take or Issue just made
-- when the agent's cap refused it (agent.lua), if nothing was recorded for
-- it meanwhile, so that repeating the request doesn't find it open.
-- KEYS: operation key, action key. ARGV: base, operation_id.
local op, act, base, opID = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local f = redis.call('HMGET', op, 'state', 'al')
if f[1] ~= 'open' or (f[2] and f[2] ~= '') then
  return 0
end
redis.call('DEL', op)
if current_of(redis.call('GET', act)) == opID then
  redis.call('DEL', act)
end
redis.call('ZREM', base .. 'open', opID)
return 1

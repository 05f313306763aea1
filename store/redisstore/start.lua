-- start.lua (after lib.lua): the start mark, a claim's last step before its
-- handler runs (take.lua; webkit/RULES.md "Claims are never stranded").
-- KEYS: the claim token key ("<base>tok:<token>"), and the key of the
--       operation the claim's reply named ("<base>op:<operation_id>").
-- ARGV: 1 claim token, 2 now, 3 the value the claim gave the token key
--       (take.lua: the operation_id, ' ', when the token is forgotten),
--       4 that instant.
-- Returns 1 when the token still holds its claim, now marked started (st
-- '1'): from then on only its holder's Release, Finish or Resolve ends
-- it. Else 0: the claim was released or undone (a Take that ran after its
-- caller gave up, and the next request or Performing undid it), and the
-- handler must not run.
--
-- With DurableDisk (WAITAOF) and DurableReplicas (WAIT) this write is also
-- what the durability confirmation waits for (durability.go): written on
-- the confirming connection after the claim, a confirmed mark confirms the
-- claim too.
local tokKey, token, now = KEYS[1], ARGV[1], ARGV[2]
local v = redis.call('GET', tokKey)
local op
if v == ARGV[3] and cmp(now, ARGV[4]) <= 0 then
  -- Most often the token key holds what the claim wrote, and names the
  -- operation of KEYS[2]: what token_of would read, without reading it.
  op = KEYS[2]
else
  local tk = token_of(v, now)
  if not tk or tk == 'r' then return 0 end
  op = string.sub(tokKey, 1, #tokKey - #token - 4) .. 'op:' .. tk
end
local f = redis.call('HMGET', op, 'state', 'claim', 'k')
if f[1] ~= 'performing' or f[2] ~= token or gone(f[3], now) then return 0 end
redis.call('HSET', op, 'st', '1')
return 1

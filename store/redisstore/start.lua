-- start.lua (after lib.lua): the start mark, a claim's last step before its
-- handler runs (take.lua; webkit/RULES.md "Claims are never stranded").
-- KEYS: the claim token key ("<base>tok:<token>").
-- ARGV: 1 claim token, 2 now.
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
local base = string.sub(tokKey, 1, #tokKey - #token - 4)
local tk = token_of(redis.call('GET', tokKey), now)
if not tk or tk == 'r' then return 0 end
local op = base .. 'op:' .. tk
local f = redis.call('HMGET', op, 'state', 'claim', 'k')
if f[1] ~= 'performing' or f[2] ~= token or gone(f[3], now) then return 0 end
redis.call('HSET', op, 'st', '1')
return 1

-- requeue_claimed.lua — on takeover, every row claimed under an older epoch is due again.
-- Older: scored (claim token) at or below the `claim_floor` this term's lease acquisition
-- recorded (lease.lua); without one, below this epoch.
-- KEYS[1]  lease key (fencing)
-- ARGV[1]  prefix  ARGV[2] token  ARGV[3] epoch  ARGV[4] limit (rows per call)
-- Returns  {'fenced'} | {'ok', moved, remaining}
-- Bounded per call; the caller repeats while `remaining` > 0.
if fenced(ARGV[2]) then return {'fenced'} end
local epoch = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local now = now_ms()
local floor = tonumber(redis.call('GET', K_CLAIM_FLOOR) or '') or (epoch - 1)
local members = redis.call('ZRANGEBYSCORE', K_CLAIMED, '-inf', floor, 'LIMIT', 0, limit)
for _, m in ipairs(members) do
  redis.call('ZREM', K_CLAIMED, m)
  local tenant, row = string.match(m, '^(.-)/(.*)$')
  if tenant then
    redis.call('ZADD', k_due(tenant), now, row)
    tenant_due(tenant, now)
  end
end
local remaining = redis.call('ZCOUNT', K_CLAIMED, '-inf', floor)
return {'ok', #members, remaining}

-- commit.lua — store hooks and make one delivery row per sink entry due now (R1, R2).
-- KEYS[1]  lease key of the partition (routing only; commit is not fenced)
-- ARGV[1]  prefix   ARGV[2] tenant   ARGV[3] source   ARGV[4] max_hook_bytes
-- ARGV[5]  n (hooks in this call), then n pairs: body, headers (JSON object text or '')
-- Returns  {'ok', first_hook_id, rows_per_hook, now_ms}
--       |  {'unknown_source'} | {'too_large', index, size} | {'bad_request', detail}
-- Nothing is written unless every check passed (Redis does not roll back a failed script).
local tenant, source = ARGV[2], ARGV[3]
local max_bytes = tonumber(ARGV[4])
local n = tonumber(ARGV[5])
if not n or n < 1 or #ARGV ~= 5 + 2 * n then return {'bad_request', 'argument count'} end
local modules = redis.call('HGET', k_source(tenant, source), 'modules')
if not modules then return {'unknown_source'} end
local sinks = 0
for _ in string.gmatch(modules, '[^,]+') do sinks = sinks + 1 end
for i = 1, n do
  local size = #ARGV[4 + 2 * i]
  if size > max_bytes then return {'too_large', i, size} end
end
local now = now_ms()
if sinks == 0 then return {'ok', 0, 0, now} end
local last = redis.call('INCRBY', K_SEQ, n)
local first = last - n + 1
local due = k_due(tenant)
for i = 1, n do
  local hook = first + i - 1
  local body = ARGV[4 + 2 * i]
  redis.call('HSET', k_hook(hook), 'b', body, 'h', ARGV[5 + 2 * i], 't', now, 'tn', tenant,
    's', source, 'k', modules, 'n', sinks, 'z', #body)
  for idx = 0, sinks - 1 do
    redis.call('ZADD', due, now, hook .. '.' .. idx)
  end
end
tenant_due(tenant, now)
redis.call('PUBLISH', K_WAKE, tenant)
redis.call('HINCRBY', K_STATS, 'committed', n)
return {'ok', first, sinks, now}

-- settle.lua — record a batch of attempt outcomes in one call (R3, R4, R8, R9).
-- KEYS[1]  lease key (fencing, R25)
-- ARGV[1]  prefix  ARGV[2] token  ARGV[3] epoch
-- then     7 fields per outcome: op, tenant, row id, x, attempts, first attempt ms, last error
--          op 'D' delivered        (the only way a row is deleted, invariant 1)
--          op 'R' retry            x = delay ms; attempts/first/error recorded on the row
--          op 'P' park             x = delay ms; attempt count unchanged (R16)
--          op 'X' dead-letter      x = reason; appended to the tenant's dead-letter stream
--          op 'G' drop             the row's hook is gone: nothing left to deliver (R20)
-- Returns  {'fenced'} | {'ok', applied, skipped, lanes released}
-- A terminal outcome (D, X) of a lane's head releases the lane in this same call:
-- the next member becomes the head, due now (R11). (G has no hook to name its lane;
-- the claim's sweep heals that lane, R12.)
-- An outcome whose row is not claimed under this epoch is skipped, so a batch
-- re-sent after a lost reply (or a NOSCRIPT reload) is never applied twice.
if fenced(ARGV[2]) then return {'fenced'} end
local epoch = tonumber(ARGV[3])
local now = now_ms()
local applied, skipped = 0, 0
local counts = {D = 0, R = 0, P = 0, X = 0, G = 0}
local released = 0

local function release(hook, idx, tenant, row)
  local lane = redis.call('HGET', k_hook(hook), 'L' .. idx)
  if lane and redis.call('GET', k_lanehead(lane)) == row then
    promote(lane, tenant, now)
    released = released + 1
  end
end

-- One row of a hook is finished: drop the hook when no row or dead letter needs it.
local function finish_row(hook, dead)
  local hk = k_hook(hook)
  if redis.call('EXISTS', hk) == 0 then return end
  local left = redis.call('HINCRBY', hk, 'n', -1)
  local dead_count = 0
  if dead then
    dead_count = redis.call('HINCRBY', hk, 'd', 1)
  else
    dead_count = tonumber(redis.call('HGET', hk, 'd')) or 0
  end
  if left <= 0 and dead_count == 0 then redis.call('DEL', hk) end
end

local i = 4
while i + 6 <= #ARGV do
  local op, tenant, row, x = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local attempts, first, err = ARGV[i + 4], ARGV[i + 5], ARGV[i + 6]
  i = i + 7
  local member = tenant .. '/' .. row
  if tonumber(redis.call('ZSCORE', K_CLAIMED, member)) ~= epoch then
    skipped = skipped + 1
  else
    redis.call('ZREM', K_CLAIMED, member)
    local hook, idx = split_row(row)
    if op == 'D' or op == 'G' then
      redis.call('DEL', k_row(row))
      if hook then
        release(hook, idx, tenant, row)
        finish_row(hook, false)
      end
    elseif op == 'R' or op == 'P' then
      local due = now + (tonumber(x) or 0)
      if op == 'R' then
        redis.call('HSET', k_row(row), 'a', attempts, 'f', first, 'e', err)
      end
      redis.call('ZADD', k_due(tenant), due, row)
      tenant_due(tenant, due)
    elseif op == 'X' then
      local source, modules = '', ''
      if hook then
        local h = redis.call('HMGET', k_hook(hook), 's', 'k')
        source, modules = h[1] or '', h[2] or ''
      end
      local module = ''
      local n = 0
      for m in string.gmatch(modules, '[^,]+') do
        if tostring(n) == idx then module = m end
        n = n + 1
      end
      redis.call('XADD', k_dlq(tenant), '*', 'row', row, 'hook', hook or '', 'tenant', tenant,
        'source', source, 'sink', idx or '', 'module', module, 'reason', x,
        'attempts', attempts, 'first', first, 'error', err, 'at', now)
      redis.call('SADD', K_DLQ_TENANTS, tenant)
      redis.call('DEL', k_row(row))
      if hook then
        release(hook, idx, tenant, row)
        finish_row(hook, true)
      end
    end
    counts[op] = (counts[op] or 0) + 1
    applied = applied + 1
  end
end
if counts.D > 0 then redis.call('HINCRBY', K_STATS, 'delivered', counts.D) end
if counts.X > 0 then redis.call('HINCRBY', K_STATS, 'dead_lettered', counts.X) end
if counts.G > 0 then redis.call('HINCRBY', K_STATS, 'dropped', counts.G) end
return {'ok', applied, skipped, released}

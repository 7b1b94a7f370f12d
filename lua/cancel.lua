-- cancel.lua — cancel a scheduled hook before any of its rows is claimed, atomically.
-- KEYS[1]  lease key (routing only; not fenced: rows that were never claimed are not in
--          flight, and a claim is a script too, so the two never interleave)
-- ARGV[1]  prefix  ARGV[2] tenant  ARGV[3] hook id
-- Returns  {'cancelled', rows removed}
--       |  {'not_found'}: no live hook of that id for that tenant (never committed, another
--          tenant's, or every row finished and the hook deleted)
--       |  {'not_scheduled'}: the hook was due at its commit (no `deliver_at` / delay in
--          the future then)
--       |  {'claimed', row, attempts}: a row is claimed (an attempt queued or running, when
--          attempts is 0) or was attempted before (attempts > 0): nothing cancelled
--       |  {'finished', rows made, rows left}: a row was delivered, dead-lettered or dropped
--          already: nothing cancelled
-- Every row is found before the first write; a cancelled hook's rows leave their due set or
-- lane, its hash and body are deleted, its bytes leave the tenant's count and the `stats`
-- field `cancelled` counts it. Its idempotency key, if any, still answers its id, so a
-- producer's retry does not commit it again.
-- A cancelled row heading its lane: with members behind it, the head is left pointing at
-- the gone row and the scheduler's lane sweep (claim.lua) promotes the next member, as for
-- any head whose row is gone (only the scheduler moves lane state); without members the
-- lane becomes idle.
local tenant, hook = ARGV[2], ARGV[3]
if not string.match(hook or '', '^%d+$') then return {'bad_request', 'hook id must be a whole number'} end
local hk = k_hook(hook)
local f = redis.pcall('HMGET', hk, 'tn', 'k', 'n', 'd', 'da', 'm', 'z', 'cc')
if type(f) ~= 'table' or f.err or f[1] ~= tenant then return {'not_found'} end
local modules, left, dead, made = f[2] or '', tonumber(f[3]) or 0, tonumber(f[4]) or 0, tonumber(f[6])
if not f[5] then return {'not_scheduled'} end
if dead > 0 or not made or left ~= made then return {'finished', made or 0, left} end
local due = k_due(tenant)
local found = {}
local idx = 0
for _ in string.gmatch(modules, '[^,]+') do
  local row = hook .. '.' .. idx
  if redis.call('ZSCORE', K_CLAIMED, tenant .. '/' .. row) then
    return {'claimed', row, tonumber(redis.pcall('HGET', k_row(row), 'a')) or 0}
  end
  local a = redis.pcall('HGET', k_row(row), 'a')
  a = type(a) == 'string' and tonumber(a) or 0
  local lane = redis.call('HGET', hk, 'L' .. idx)
  local where = nil
  if redis.call('ZSCORE', due, row) then
    where = 'due'
  elseif lane and redis.call('LPOS', k_lane(lane), row) then
    where = 'member'
  end
  if where then
    if a > 0 then return {'claimed', row, a} end
    found[#found + 1] = {row, where, lane}
  end
  idx = idx + 1
end
if #found ~= left then return {'finished', made, left} end
for _, r in ipairs(found) do
  local row, where, lane = r[1], r[2], r[3]
  if where == 'due' then
    redis.call('ZREM', due, row)
    if lane and redis.call('GET', k_lanehead(lane)) == row and redis.call('LLEN', k_lane(lane)) == 0 then
      redis.call('DEL', k_lanehead(lane))
      redis.call('HDEL', K_HEAD_LANE, row)
    end
  else
    redis.call('LREM', k_lane(lane), 1, row)
    redis.call('DECR', K_LANE_MEMBERS)
    if redis.call('LLEN', k_lane(lane)) == 0 then lane_drained(lane, tenant) end
  end
  redis.call('DEL', k_row(row))
end
if f[8] then redis.call('RPUSH', K_BLOB_GC, f[8]) end
add_bytes(K_TENANT_BYTES, tenant, -(tonumber(f[7]) or 0))
add_bytes(K_TENANT_HOOKS, tenant, -1)
redis.call('DEL', hk, k_body(hook))
if redis.call('ZCARD', due) == 0 then redis.call('ZREM', K_TENANTS, tenant) end
redis.call('HINCRBY', K_STATS, 'cancelled', 1)
return {'cancelled', #found}

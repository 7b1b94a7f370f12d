-- dlq_purge.lua — delete dead letters and release their hook bodies, by id or by retention.
-- KEYS[1]  lease key (routing only; not fenced: dead letters are not rows in flight)
-- ARGV[1]  prefix  ARGV[2] tenant  ARGV[3] mode
--   mode 'ids'     then the stream entry ids to delete
--   mode 'retain'  ARGV[4] max age ms (0: no age limit)  ARGV[5] max entries (0: no count
--                  limit)  ARGV[6] entries deleted per call at most
-- Returns  {'ok', purged, more}   more = 1 when 'retain' stopped at its per-call limit
--       |  {'bad_request', detail}
-- A hook is kept while dead letters reference it (field `d`); the last one purged of a
-- hook with no row left (`n` <= 0) deletes the hook and its body; its claim-check
-- reference, if any, goes to the `blob_gc` list for the leader to delete; its body
-- bytes leave the tenant's count (`tenant_bytes`).
-- 'retain' deletes from the oldest end: entries older than now - max age, and the
-- oldest entries beyond max entries.
local tenant, mode = ARGV[2], ARGV[3]
local dlq = k_dlq(tenant)
local purged = 0
local more = 0

local function release(fields)
  local hook = nil
  for j = 1, #fields, 2 do
    if fields[j] == 'hook' then hook = fields[j + 1] end
  end
  if not hook or hook == '' then return end
  local hk = k_hook(hook)
  if redis.call('EXISTS', hk) == 0 then return end
  local d = redis.call('HINCRBY', hk, 'd', -1)
  local n = tonumber(redis.call('HGET', hk, 'n')) or 0
  if d <= 0 and n <= 0 then
    -- The leader deletes the body's claim-check blob (handed over by settle.lua).
    local f = redis.call('HMGET', hk, 'cc', 'z')
    if f[1] then redis.call('RPUSH', K_BLOB_GC, f[1]) end
    add_bytes(K_TENANT_BYTES, tenant, -(tonumber(f[2]) or 0))
    add_bytes(K_TENANT_HOOKS, tenant, -1)
    redis.call('DEL', hk, k_body(hook))
  end
end

if mode == 'ids' then
  for i = 4, #ARGV do
    local e = redis.call('XRANGE', dlq, ARGV[i], ARGV[i])
    if #e > 0 then
      release(e[1][2])
      redis.call('XDEL', dlq, ARGV[i])
      purged = purged + 1
    end
  end
elseif mode == 'retain' then
  local max_age, max_n, limit = tonumber(ARGV[4]) or 0, tonumber(ARGV[5]) or 0, tonumber(ARGV[6]) or 1000
  local over = 0
  if max_n > 0 then over = math.max(0, redis.call('XLEN', dlq) - max_n) end
  local cutoff = -1
  if max_age > 0 then cutoff = now_ms() - max_age end
  local entries = redis.call('XRANGE', dlq, '-', '+', 'COUNT', limit)
  for _, e in ipairs(entries) do
    local ms = tonumber(string.match(e[1], '^(%d+)'))
    if purged < over or (ms and ms < cutoff) then
      release(e[2])
      redis.call('XDEL', dlq, e[1])
      purged = purged + 1
    else
      break
    end
  end
  if purged == limit then more = 1 end
else
  return {'bad_request', 'mode ' .. tostring(mode)}
end
if redis.call('XLEN', dlq) == 0 then
  redis.call('DEL', dlq)
  redis.call('SREM', K_DLQ_TENANTS, tenant)
end
return {'ok', purged, more}

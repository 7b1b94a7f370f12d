-- dead_letter_source.lua — dead-letter one page of a source's pending rows (R20).
-- KEYS[1]  lease key: the call needs a live leader (the pipeline is up); not fenced
-- ARGV[1]  prefix  ARGV[2] tenant  ARGV[3] source id  ARGV[4] ZSCAN cursor ('0' first)
-- ARGV[5]  ZSCAN COUNT hint (rows looked at per call, roughly)
-- Returns  {'unavailable'}                 no leader holds the lease
--       |  {'ok', next cursor ('0' when the walk is done), dead-lettered, dropped}
-- The source belongs to one tenant, so only `due:<tenant>` is walked; a row is the
-- source's when its hook's `s` field names it. Each matching row leaves the due set
-- and is appended to the tenant's dead-letter stream as `source_gone(<source>)` (its
-- hook is kept: field `d` counts the dead letters that need it, for replay). A row
-- whose hook is gone is dropped and not counted. Claimed rows are not in the due set:
-- they are left to settle, and the scheduler dead-letters them `source_gone` when they
-- come back pending and are claimed again.
-- Not fenced: it moves no row it read before the call, and a script is atomic in
-- Redis, so no claim can interleave with it. The caller loops while the cursor is not
-- '0' (ZSCAN returns every row present for the whole walk at least once).
if redis.call('EXISTS', KEYS[1]) == 0 then return {'unavailable'} end
local tenant, source, cursor = ARGV[2], ARGV[3], ARGV[4]
local count = tonumber(ARGV[5]) or 100
local due = k_due(tenant)
local now = now_ms()
local scan = redis.call('ZSCAN', due, cursor, 'COUNT', count)
local members = scan[2]
local dead, dropped = 0, 0
local reason = 'source_gone(' .. source .. ')'
for j = 1, #members, 2 do
  local row = members[j]
  local hook, idx = split_row(row)
  -- ZSCAN may return a row twice across calls; one that is no longer due is skipped.
  if hook and redis.call('ZSCORE', due, row) then
    local hk = k_hook(hook)
    local h = redis.call('HMGET', hk, 's', 'k')
    if not h[1] then
      redis.call('ZREM', due, row)
      redis.call('DEL', k_row(row))
      dropped = dropped + 1
    elseif h[1] == source then
      local module = ''
      local n = 0
      for m in string.gmatch(h[2] or '', '[^,]+') do
        if tostring(n) == idx then module = m end
        n = n + 1
      end
      local st = redis.call('HMGET', k_row(row), 'a', 'f', 'e')
      redis.call('XADD', k_dlq(tenant), '*', 'row', row, 'hook', hook, 'tenant', tenant,
        'source', source, 'sink', idx, 'module', module, 'reason', reason,
        'attempts', st[1] or '0', 'first', st[2] or '', 'error', st[3] or '', 'at', now)
      redis.call('ZREM', due, row)
      redis.call('DEL', k_row(row))
      redis.call('HINCRBY', hk, 'n', -1)
      redis.call('HINCRBY', hk, 'd', 1)
      dead = dead + 1
    end
  end
end
if dead > 0 then
  redis.call('SADD', K_DLQ_TENANTS, tenant)
  redis.call('HINCRBY', K_STATS, 'dead_lettered', dead)
end
if dropped > 0 then redis.call('HINCRBY', K_STATS, 'dropped', dropped) end
if dead + dropped > 0 then
  -- Re-file the tenant as a claim would: gone when empty, at its head when not due yet.
  local first = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
  if #first == 0 then
    redis.call('ZREM', K_TENANTS, tenant)
  elseif tonumber(first[2]) > now then
    redis.call('ZADD', K_TENANTS, 'XX', first[2], tenant)
  end
end
return {'ok', scan[1], dead, dropped}

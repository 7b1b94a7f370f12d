-- dead_letter_source.lua — dead-letter one page of a source's pending rows.
-- KEYS[1]  lease key: the call needs a live leader (the pipeline is up); not fenced
-- ARGV[1]  prefix  ARGV[2] tenant  ARGV[3] source id
-- ARGV[4]  phase: 'lanes' (members of the source's ordered lanes) | 'due' (the due set)
-- ARGV[5]  SSCAN/ZSCAN cursor ('0' first)  ARGV[6] COUNT hint (entries looked at per call)
-- Returns  {'unavailable'}                 no live leader: nobody holds the lease, or the
--                                          holder has not published its window state
--                                          (`window`, 3 s TTL, same epoch) as a live one does
--       |  {'ok', next cursor ('0' when the phase is done), dead-lettered, dropped}
-- The caller runs phase 'lanes' to its end, then phase 'due' to its end.
-- A pending row of the source is either due (in `due:<tenant>`; only a lane's head is
-- there) or a member waiting behind its lane's head (`lane:<id>`). The source
-- belongs to one tenant, so only that tenant's keys are walked: lanes whose id starts
-- with `<tenant>:<source>:` (from `lanes:<tenant>`), and due rows whose hook's `s` field
-- names the source. Each such row is appended to the tenant's dead-letter stream as
-- `source_gone(<source>)` (its hook is kept: field `d` counts the dead letters that need
-- it, for replay). A due row that heads a lane releases the lane, as settle does;
-- its members went in phase 'lanes'. A row whose hook is gone is dropped and not
-- counted. Claimed rows are neither due nor members: they are left to settle, and the
-- scheduler dead-letters them `source_gone` when they come back pending and are
-- claimed again.
-- Not fenced: it moves no row it read before the call, and a script is atomic in Redis,
-- so no claim can interleave with it. SSCAN/ZSCAN return every entry present for the
-- whole walk at least once; a lane with more members than the per-call budget is
-- resumed at the same cursor.
local token = redis.call('GET', KEYS[1])
if not token then return {'unavailable'} end
local window = redis.call('GET', K_WINDOW)
local ok, st = pcall(cjson.decode, window or '')
if not window or not ok or type(st) ~= 'table' or not st.leading
  or tonumber(st.epoch) ~= tonumber(string.match(token, ':(%d+)$')) then
  return {'unavailable'}
end
local tenant, source, phase, cursor = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local count = tonumber(ARGV[6]) or 100
local due = k_due(tenant)
local now = now_ms()
local reason = 'source_gone(' .. source .. ')'
local dead, dropped = 0, 0

-- Dead-letter one pending row of the source (not in the due set or a lane any more).
local function dead_letter(row, hook, idx, modules)
  local module = ''
  local n = 0
  for m in string.gmatch(modules or '', '[^,]+') do
    if tostring(n) == idx then module = m end
    n = n + 1
  end
  local st = redis.call('HMGET', k_row(row), 'a', 'f', 'e')
  local hk = k_hook(hook)
  local f = {'row', row, 'hook', hook, 'tenant', tenant,
    'source', source, 'sink', idx, 'module', module, 'reason', reason,
    'attempts', st[1] or '0', 'first', st[2] or '', 'error', st[3] or '', 'at', now}
  -- The event type goes with the dead letter, so lists show it without the hook.
  local et = redis.pcall('HGET', hk, 'et')
  if type(et) == 'string' and et ~= '' then f[#f + 1] = 'et'; f[#f + 1] = et end
  redis.call('XADD', k_dlq(tenant), '*', unpack(f))
  redis.call('DEL', k_row(row))
  redis.call('HINCRBY', hk, 'n', -1)
  redis.call('HINCRBY', hk, 'd', 1)
  dead = dead + 1
end

local next_cursor = '0'
if phase == 'lanes' then
  local lanes = k_lanes(tenant)
  local scan = redis.call('SSCAN', lanes, cursor, 'MATCH', tenant .. ':' .. source .. ':*', 'COUNT', count)
  next_cursor = scan[1]
  local budget = count
  for _, lane in ipairs(scan[2]) do
    if budget <= 0 then
      next_cursor = cursor -- resume this page: SSCAN from the same cursor sees these lanes again
      break
    end
    local members = redis.call('LPOP', k_lane(lane), budget) or {}
    if #members > 0 then
      redis.call('DECRBY', K_LANE_MEMBERS, #members)
      budget = budget - #members
    end
    for _, row in ipairs(members) do
      local hook, idx = split_row(row)
      local h = hook and redis.call('HMGET', k_hook(hook), 's', 'k') or {false, false}
      if h[1] then dead_letter(row, hook, idx, h[2]) else dropped = dropped + 1 end
    end
    if redis.call('LLEN', k_lane(lane)) == 0 then
      redis.call('SREM', lanes, lane)
    else
      next_cursor = cursor
    end
  end
elseif phase == 'due' then
  local scan = redis.call('ZSCAN', due, cursor, 'COUNT', count)
  next_cursor = scan[1]
  local members = scan[2]
  for j = 1, #members, 2 do
    local row = members[j]
    local hook, idx = split_row(row)
    -- ZSCAN may return a row twice across calls; one that is no longer due is skipped.
    if hook and redis.call('ZSCORE', due, row) then
      local h = redis.call('HMGET', k_hook(hook), 's', 'k', 'L' .. idx)
      if not h[1] then
        redis.call('ZREM', due, row)
        redis.call('DEL', k_row(row))
        local lane = head_lane_of(row, nil)
        if lane then promote(lane, tenant, now) end
        dropped = dropped + 1
      elseif h[1] == source then
        redis.call('ZREM', due, row)
        dead_letter(row, hook, idx, h[2])
        local lane = head_lane_of(row, h[3])
        if lane then promote(lane, tenant, now) end
      end
    end
  end
else
  return {'bad_request', 'phase ' .. tostring(phase)}
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
return {'ok', next_cursor, dead, dropped}

-- dlq_replay.lua — put dead letters back as new due rows (attempts reset, horizon restarted).
-- KEYS[1]  lease key (routing only; not fenced: the script reads and writes in one step)
-- ARGV[1]  prefix  ARGV[2] tenant  then the dead-letter stream entry ids to replay
-- Returns  {'ok', replayed, missing, hook_gone, live}
--   missing    no such entry (already replayed or purged)
--   hook_gone  the entry's hook is gone (or the entry names none): nothing to deliver,
--              the entry stays until it is purged
--   live       the entry's row is due or claimed already: the entry stays
-- A replayed row gets no row hash (no attempts, no first-attempt time: its retry
-- horizon starts again at its next attempt) and is due now; its hook gets one more row
-- left (`n`) and one dead letter less (`d`); the entry is deleted in the same step, so
-- two replays of one entry cannot both put the row back. A row of an ordered sink
-- (hook field `L<idx>` names its lane) becomes the lane's head when the lane is
-- idle, and otherwise joins the back of the lane as a member, as a commit would.
local tenant = ARGV[2]
local dlq = k_dlq(tenant)
local due = k_due(tenant)
local now = now_ms()
local replayed, missing, gone, live = 0, 0, 0, 0
for i = 3, #ARGV do
  local id = ARGV[i]
  local e = redis.call('XRANGE', dlq, id, id)
  if #e == 0 then
    missing = missing + 1
  else
    local f = e[1][2]
    local row, hook = nil, nil
    for j = 1, #f, 2 do
      if f[j] == 'row' then row = f[j + 1] elseif f[j] == 'hook' then hook = f[j + 1] end
    end
    local h, idx = nil, nil
    if row then h, idx = split_row(row) end
    if not h or h ~= hook or redis.call('EXISTS', k_hook(h)) == 0 then
      gone = gone + 1
    elseif redis.call('ZSCORE', due, row) or redis.call('ZSCORE', K_CLAIMED, tenant .. '/' .. row) then
      live = live + 1
    else
      redis.call('XDEL', dlq, id)
      redis.call('DEL', k_row(row))
      local hk = k_hook(h)
      local lane = redis.call('HGET', hk, 'L' .. idx)
      if lane and redis.call('EXISTS', k_lanehead(lane)) == 1 then
        redis.call('RPUSH', k_lane(lane), row)
        redis.call('INCR', K_LANE_MEMBERS)
        redis.call('SADD', k_lanes(tenant), lane)
        redis.call('SADD', K_LANE_TENANTS, tenant)
      else
        if lane then set_head(lane, row) end
        redis.call('ZADD', due, now, row)
      end
      redis.call('HINCRBY', hk, 'n', 1)
      if (tonumber(redis.call('HGET', hk, 'd')) or 0) > 0 then redis.call('HINCRBY', hk, 'd', -1) end
      replayed = replayed + 1
    end
  end
end
if replayed > 0 then
  tenant_due(tenant, now)
  redis.call('HINCRBY', K_STATS, 'replayed', replayed)
  redis.call('PUBLISH', K_WAKE, tenant)
end
if redis.call('XLEN', dlq) == 0 then
  redis.call('DEL', dlq)
  redis.call('SREM', K_DLQ_TENANTS, tenant)
end
return {'ok', replayed, missing, gone, live}

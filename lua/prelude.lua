-- prelude.lua: prepended to every ankusa script (see src/store/scripts.rs).
-- The key layout mirrors src/keyspace.rs; a unit test checks the two agree.
-- KEYS[1] is always the partition's lease key: it routes the call to the
-- partition's cluster slot and is the fencing check (R25).
-- ARGV[1] is always the partition prefix `ankusa:{<instance>.p<N>}:`.
local P = ARGV[1]
local function k_source(tenant, source) return P .. 'source:' .. tenant .. ':' .. source end
local function k_hook(hook) return P .. 'hook:' .. hook end
local function k_row(row) return P .. 'row:' .. row end
local function k_due(tenant) return P .. 'due:' .. tenant end
local function k_dlq(tenant) return P .. 'dlq:' .. tenant end
local function k_lane(lane) return P .. 'lane:' .. lane end
local function k_lanehead(lane) return P .. 'lanehead:' .. lane end
local function k_lanes(tenant) return P .. 'lanes:' .. tenant end
local function k_idem(tenant, source, key) return P .. 'idem:' .. tenant .. ':' .. source .. ':' .. redis.sha1hex(key) end
local function k_attempts(hook) return P .. 'attempts:' .. hook end
local function k_kept(hook) return P .. 'kept:' .. hook end
local function k_history(tenant) return P .. 'history:' .. tenant end
local K_LANE_MEMBERS = P .. 'lane_members'
local K_LANE_TENANTS = P .. 'lane_tenants'
local K_TENANTS = P .. 'tenants'
local K_CLAIMED = P .. 'claimed'
local K_SEQ = P .. 'seq'
local K_STATS = P .. 'stats'
local K_DLQ_TENANTS = P .. 'dlq_tenants'
local K_WAKE = P .. 'wake'
local K_BLOB_GC = P .. 'blob_gc'
-- Claim tokens (P6): every claim call takes the next value of `claim_seq` and scores its
-- rows in `claimed` with it; an outcome applies only to the claim it answers. Acquiring
-- the lease records the last token issued before the term in `claim_floor`.
local K_CLAIM_SEQ = P .. 'claim_seq'
local K_CLAIM_FLOOR = P .. 'claim_floor'

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Fencing (R25): a caller may move rows only while KEYS[1] holds its token.
local function fenced(token)
  return redis.call('GET', KEYS[1]) ~= token
end

-- A row id is `<hook id>.<sink index>`.
local function split_row(row)
  local hook, idx = string.match(row, '^(%d+)%.(%d+)$')
  return hook, idx
end

-- Make the next member of `lane` its head, due at `now`; with no member left the lane
-- is idle (no head). Returns the new head or nil. Only scripts the scheduler calls use
-- this (R12: only the scheduler moves lane state).
local function promote(lane, tenant, now)
  local nxt = redis.call('LPOP', k_lane(lane))
  if not nxt then
    redis.call('DEL', k_lanehead(lane))
    redis.call('SREM', k_lanes(tenant), lane)
    return nil
  end
  redis.call('DECR', K_LANE_MEMBERS)
  redis.call('SET', k_lanehead(lane), nxt)
  redis.call('ZADD', k_due(tenant), now, nxt)
  redis.call('ZADD', K_TENANTS, 'LT', now, tenant)
  if redis.call('LLEN', k_lane(lane)) == 0 then
    redis.call('SREM', k_lanes(tenant), lane)
  end
  return nxt
end

-- Lower a tenant's score in the active-tenant index to `due` (never raises it).
local function tenant_due(tenant, due)
  redis.call('ZADD', K_TENANTS, 'LT', due, tenant)
end

-- prelude.lua: prepended to every ankusa script (see src/store/scripts.rs).
-- The key layout mirrors src/keyspace.rs; tests/keyspace.rs builds every key both ways.
-- KEYS[1] is always the partition's lease key: it routes the call to the
-- partition's cluster slot and is the fencing check (R25).
-- ARGV[1] is always the partition prefix `ankusa:{<instance>.p<N>}:`.
local P = ARGV[1]
local function k_source(tenant, source) return P .. 'source:' .. tenant .. ':' .. source end
local function k_hook(hook) return P .. 'hook:' .. hook end
-- A hook's body, apart from its hash so the hash stays a listpack (issue 12).
local function k_body(hook) return P .. 'body:' .. hook end
local function k_row(row) return P .. 'row:' .. row end
local function k_due(tenant) return P .. 'due:' .. tenant end
local function k_dlq(tenant) return P .. 'dlq:' .. tenant end
local function k_lane(lane) return P .. 'lane:' .. lane end
local function k_lanehead(lane) return P .. 'lanehead:' .. lane end
local function k_lanes(tenant) return P .. 'lanes:' .. tenant end
local function k_idem(tenant, source, key) return P .. 'idem:' .. tenant .. ':' .. source .. ':' .. redis.sha1hex(key) end
local function k_attempts(hook) return P .. 'attempts:' .. hook end
local function k_kept(hook) return P .. 'kept:' .. hook end
local function k_keptbody(hook) return P .. 'keptbody:' .. hook end
local function k_history(tenant) return P .. 'history:' .. tenant end
local function k_srcvt(tenant) return P .. 'srcvt:' .. tenant end
local K_LANE_MEMBERS = P .. 'lane_members'
local K_LANE_TENANTS = P .. 'lane_tenants'
local K_TENANTS = P .. 'tenants'
local K_CLAIMED = P .. 'claimed'
local K_SEQ = P .. 'seq'
local K_STATS = P .. 'stats'
local K_DLQ_TENANTS = P .. 'dlq_tenants'
local K_WAKE = P .. 'wake'
local K_BLOB_GC = P .. 'blob_gc'
-- Claim-check blobs of finished hooks, scored by when they may be deleted: kept for the
-- retention (`claim_check.retention_ms`), since a pointer may still wait on a queue (R18).
local K_BLOB_RETAIN = P .. 'blob_retain'
-- Settings kept server side, written by the leader (window.lua), read by the scripts:
-- `max_hook_bytes` (commit), `cc_retention_ms` (settle). Not the caller's word (issue 17.10).
local K_SETTINGS = P .. 'settings'
-- Lane heads: row id -> lane id, so a head whose hook is gone still releases its lane (R11).
local K_HEAD_LANE = P .. 'head_lane'
-- Open breakers' snapshots for the next term (breakers.lua, R16).
local K_BREAKERS = P .. 'breakers'
-- Operational events: entries disabled after prolonged failure or enabled again (P9).
local K_EVENTS = P .. 'events'
-- The leader's window state (window.lua, read by pressure), the lease and the epoch (R25).
local K_WINDOW = P .. 'window'
local K_LEASE = P .. 'lease'
local K_EPOCH = P .. 'epoch'
-- Claim tokens (P6): every claim call takes the next value of `claim_seq` and scores its
-- rows in `claimed` with it; an outcome applies only to the claim it answers. Acquiring
-- the lease records the last token issued before the term in `claim_floor`.
local K_CLAIM_SEQ = P .. 'claim_seq'
local K_CLAIM_FLOOR = P .. 'claim_floor'

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Redis' clock in µs (`TIME` advances inside a script): a script with a time budget
-- (issue 17.11) reads it at its start and checks the difference as it goes.
local function clock_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
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
-- A tenant with no lane holding members left leaves `lane_tenants` (issue 17.5).
local function lane_drained(lane, tenant)
  redis.call('SREM', k_lanes(tenant), lane)
  if redis.call('SCARD', k_lanes(tenant)) == 0 then redis.call('SREM', K_LANE_TENANTS, tenant) end
end
-- Make `row` the head of `lane` (and record which lane it heads).
local function set_head(lane, row)
  redis.call('SET', k_lanehead(lane), row)
  redis.call('HSET', K_HEAD_LANE, row, lane)
end
local function promote(lane, tenant, now)
  local old = redis.call('GET', k_lanehead(lane))
  if old then redis.call('HDEL', K_HEAD_LANE, old) end
  local nxt = redis.call('LPOP', k_lane(lane))
  if not nxt then
    redis.call('DEL', k_lanehead(lane))
    lane_drained(lane, tenant)
    return nil
  end
  redis.call('DECR', K_LANE_MEMBERS)
  set_head(lane, nxt)
  redis.call('ZADD', k_due(tenant), now, nxt)
  redis.call('ZADD', K_TENANTS, 'LT', now, tenant)
  if redis.call('LLEN', k_lane(lane)) == 0 then
    lane_drained(lane, tenant)
  end
  return nxt
end

-- The lane `row` heads, if any: recorded at the head (so no hook is needed), else the
-- hook's `L<idx>` field (`lane_hint`), checked against the lane's head (R11).
local function head_lane_of(row, lane_hint)
  local lane = redis.call('HGET', K_HEAD_LANE, row) or lane_hint
  if lane and redis.call('GET', k_lanehead(lane)) == row then return lane end
  return nil
end

-- Lower a tenant's score in the active-tenant index to `due` (never raises it).
local function tenant_due(tenant, due)
  redis.call('ZADD', K_TENANTS, 'LT', due, tenant)
end

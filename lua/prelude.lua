-- prelude.lua: prepended to every ankusa script (see src/store/scripts.rs).
-- The key layout mirrors src/keyspace.rs; tests/keyspace.rs builds every key both ways.
-- KEYS[1] is always the partition's lease key: it routes the call to the
-- partition's cluster slot and is the fencing check.
-- ARGV[1] is always the partition prefix `ankusa:{<instance>.p<N>}:`.
local P = ARGV[1]
local function k_source(tenant, source) return P .. 'source:' .. tenant .. ':' .. source end
local function k_hook(hook) return P .. 'hook:' .. hook end
-- A hook's body, apart from its hash so the hash stays a listpack.
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
-- retention (`claim_check.retention_ms`), since a pointer may still wait on a queue.
local K_BLOB_RETAIN = P .. 'blob_retain'
-- Settings kept server side, written by the leader (window.lua), read by the scripts:
-- `max_hook_bytes` (commit), `cc_retention_ms` (settle). Not the caller's word.
local K_SETTINGS = P .. 'settings'
-- Lane heads: row id -> lane id, so a head whose hook is gone still releases its lane.
local K_HEAD_LANE = P .. 'head_lane'
-- Open breakers' snapshots for the next term (breakers.lua).
local K_BREAKERS = P .. 'breakers'
-- Operational events: entries disabled after prolonged failure or enabled again.
local K_EVENTS = P .. 'events'
-- The delivery log's stream: what settle ended, packed per call, for the archiver to move to
-- the log store ([log] url); trimmed by the archiver once archived.
local K_LOG = P .. 'log'
-- The leader's window state (window.lua, read by pressure), the lease and the epoch.
local K_WINDOW = P .. 'window'
local K_LEASE = P .. 'lease'
local K_EPOCH = P .. 'epoch'
-- Claim tokens: every claim call takes the next value of `claim_seq` and scores its
-- rows in `claimed` with it; an outcome applies only to the claim it answers. Acquiring
-- the lease records the last token issued before the term in `claim_floor`.
local K_CLAIM_SEQ = P .. 'claim_seq'
local K_CLAIM_FLOOR = P .. 'claim_floor'
-- Who holds the memory (`ankusa tenants top --by bytes`): `tenant_bytes` counts, per
-- tenant, the body bytes of its stored hooks (pending or dead-lettered; commit adds, the
-- scripts that delete a hook subtract); `kept_bytes` the bodies of its delivered hooks kept
-- for resend. `kept_index` orders the kept hooks by when they were kept (member
-- `<hook>:<bytes>:<tenant>`), so the oldest give way first: past their age, past the byte
-- budget, or when Redis is full (kept.lua). Stats field `kept_bytes` is the partition's sum.
local K_TENANT_BYTES = P .. 'tenant_bytes'
-- `tenant_hooks` counts, per tenant, its stored hooks (pending or dead-lettered), beside
-- `tenant_bytes` and changed where it changes: what a commit's quota is checked against.
local K_TENANT_HOOKS = P .. 'tenant_hooks'
local K_KEPT_BYTES = P .. 'kept_bytes'
local K_KEPT_INDEX = P .. 'kept_index'

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Redis' clock in µs (`TIME` advances inside a script): a script with a time budget
-- reads it at its start and checks the difference as it goes.
local function clock_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Failover safety (hash): `replicas`, the replicas this server had attached when the
-- current term started (raised by each renewal, never lowered but by a new term); `replid`,
-- the replication history under which hook ids were last issued; `space`, the random part
-- of every `webhook-id` (fixed at the partition's first term, new after a FLUSHALL);
-- `expected`, the replicas the sentinels know alive (written by each lease acquisition and
-- renewal): commit.lua refuses on a primary with fewer attached; `deposed`, the primary the
-- sentinels name instead of this server (written by a sentinel-aware worker that finds this
-- server a master the sentinels do not name, `src/store/primary.rs`; cleared by a lease
-- acquisition, which only starts a term on the primary they name): nothing is committed or
-- moved here while it is set, as the sentinels will make this server a replica and throw
-- away what it took (the resync also wipes the field).
local K_REPLICATION = P .. 'replication'

-- The primary the sentinels name instead of this server, or nil (`deposed` above).
local function deposed()
  return redis.call('HGET', K_REPLICATION, 'deposed') or nil
end

-- This server's attached replicas and replication id (`INFO replication`; a promotion or a
-- restart gives a server a new replication id).
-- Replicas are counted only once `online` (synced): `connected_slaves` also counts one that
-- waits for or receives its first full sync, which holds none of what this server has; a
-- commit acknowledged beside it only would be lost with this server (CI).
local function replication()
  local info = redis.call('INFO', 'replication')
  local online = 0
  for state in string.gmatch(info, 'slave%d+:[^\r\n]*state=(%a+)') do
    if state == 'online' then online = online + 1 end
  end
  return online, string.match(info, 'master_replid:(%x+)') or ''
end

-- A primary that has fewer replicas attached than when the term started has most likely
-- just seen its replica promoted (a graceful `SENTINEL FAILOVER` detaches it at once, while
-- the sentinels convert this server into a replica only ~10 s later): whatever it writes
-- now is thrown away then. So nothing moves here until a new term (whose lease acquisition
-- counts the replicas again) starts, after the sentinels were asked who the primary is.
-- Returns the replicas attached and the count wanted when short of it, else nil.
local function replicas_lost()
  local want = tonumber(redis.call('HGET', K_REPLICATION, 'replicas') or '') or 0
  if want == 0 then return nil end
  local have = replication()
  if have < want then return have, want end
  return nil
end

-- Fencing: a caller may move rows only while KEYS[1] holds its token, on a server
-- that kept the replicas its term started with and that the sentinels did not depose.
local function fenced(token)
  return redis.call('GET', KEYS[1]) ~= token or replicas_lost() ~= nil or deposed() ~= nil
end

-- A row id is `<hook id>.<sink index>`.
local function split_row(row)
  local hook, idx = string.match(row, '^(%d+)%.(%d+)$')
  return hook, idx
end

-- Make the next member of `lane` its head, due at `now` (or at its hook's scheduled time); with no member left the lane
-- is idle (no head). Returns the new head or nil. Only scripts the scheduler calls use
-- this (only the scheduler moves lane state).
-- A tenant with no lane holding members left leaves `lane_tenants`.
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
  -- A scheduled hook (`da`, commit.lua) is due at its time, not now: it holds its lane.
  local at = now
  local hook = split_row(nxt)
  if hook then
    local da = redis.pcall('HGET', k_hook(hook), 'da')
    da = type(da) == 'string' and tonumber(da) or nil
    if da and da > now then at = da end
  end
  redis.call('ZADD', k_due(tenant), at, nxt)
  redis.call('ZADD', K_TENANTS, 'LT', at, tenant)
  if redis.call('LLEN', k_lane(lane)) == 0 then
    lane_drained(lane, tenant)
  end
  return nxt
end

-- The lane `row` heads, if any: recorded at the head (so no hook is needed), else the
-- hook's `L<idx>` field (`lane_hint`), checked against the lane's head.
local function head_lane_of(row, lane_hint)
  local lane = redis.call('HGET', K_HEAD_LANE, row) or lane_hint
  if lane and redis.call('GET', k_lanehead(lane)) == row then return lane end
  return nil
end

-- Lower a tenant's score in the active-tenant index to `due` (never raises it).
local function tenant_due(tenant, due)
  redis.call('ZADD', K_TENANTS, 'LT', due, tenant)
end

-- Add `n` (negative: subtract) to `tenant`'s count in the hash `key`; a count that reaches
-- 0 or less leaves the hash, so no tenant shows a negative count (hooks stored before the
-- counts existed are subtracted without having been added).
local function add_bytes(key, tenant, n)
  if n == 0 then return end
  if redis.call('HINCRBY', key, tenant, n) <= 0 then redis.call('HDEL', key, tenant) end
end

-- A delivered hook kept for resend is indexed in `kept_index` as "<hook>:<bytes>:<tenant>"
-- scored by when it was kept, its bytes counted in `kept_bytes` (settle.lua, batched).

-- Drop the kept hook of an index member: its hash and body (gone already when they
-- expired), with `records` its attempt records too, its bytes off the counts. Returns the
-- bytes.
local function drop_kept(member, records)
  redis.call('ZREM', K_KEPT_INDEX, member)
  local hook, bytes, tenant = string.match(member, '^(%d+):(%d+):(.+)$')
  if not hook then return 0 end
  bytes = tonumber(bytes)
  redis.call('DEL', k_kept(hook), k_keptbody(hook))
  if records then redis.call('DEL', k_attempts(hook)) end
  add_bytes(K_KEPT_BYTES, tenant, -bytes)
  if redis.call('HINCRBY', K_STATS, 'kept_bytes', -bytes) < 0 then
    redis.call('HSET', K_STATS, 'kept_bytes', 0)
  end
  return bytes
end

-- Drop the kept hooks indexed before `cutoff` (ms), then the oldest while the partition's
-- kept bytes are over `budget` (nil: no budget), at most `limit` in all; with `records`
-- their attempt records too. Returns the hooks and bytes dropped.
local function trim_kept(cutoff, budget, limit, records)
  local dropped, freed = 0, 0
  if limit <= 0 then return 0, 0 end
  local old = redis.call('ZRANGEBYSCORE', K_KEPT_INDEX, '-inf', '(' .. cutoff, 'LIMIT', 0, limit)
  for _, m in ipairs(old) do
    freed = freed + drop_kept(m, records)
    dropped = dropped + 1
  end
  if budget then
    local total = tonumber(redis.call('HGET', K_STATS, 'kept_bytes') or '') or 0
    while total > budget and dropped < limit do
      local m = redis.call('ZRANGE', K_KEPT_INDEX, 0, 0)
      if #m == 0 then break end
      local b = drop_kept(m[1], records)
      total, freed, dropped = total - b, freed + b, dropped + 1
    end
  end
  return dropped, freed
end

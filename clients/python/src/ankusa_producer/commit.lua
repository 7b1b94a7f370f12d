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
-- commit.lua — store hooks and make one delivery row per sink entry due now.
-- KEYS[1]  lease key of the partition (routing only; commit is not fenced)
-- ARGV[1]  prefix   ARGV[2] tenant   ARGV[3] source   ARGV[4] max_hook_bytes (the caller's
--          own limit: it can only lower the one kept server side, see below)
-- ARGV[5]  n (hooks in this call), then n pairs: body, headers (JSON object text or '')
--          then options, each a word and its values (docs/commit-protocol.md):
--          'idem', ttl_ms, then n producer idempotency keys ('' none): a hook whose key was
--                  committed to this tenant+source within ttl_ms is not written again;
--                  ttl_ms a whole number >= 1;
--          'sink', index: make the row of this sink entry only (resend);
--          'quota', max_bytes, max_hooks: refuse the call when the tenant's stored hooks
--                  (`tenant_bytes`, `tenant_hooks`) and those it would store exceed them;
--          'events', then n event types ('' none, else 1..=128 bytes of [A-Za-z0-9_.:/-]):
--                  the entries' event filters;
--          'deliver_at', then n times (ms since the epoch, '' none) and/or 'delay', then n
--                  delays (ms after now by the Redis clock, '' none): scheduled delivery.
--                  A hook may have one or the other; a time not after now is due now, one
--                  more than the leader's `commit.max_delay_ms` (kept in `settings`,
--                  30 days until a leader wrote it) ahead is refused.
-- Returns  {'ok', first_hook_id, rows_per_hook, now_ms, …, replicas} where `replicas`, always
--          last, is the replicas attached to this server: the caller's `WAIT` for them
--          (docs/operations.md) makes the commit survive a failover before it answers
--          {'ok', first_hook_id, rows_per_hook, now_ms}
--          with 'idem': {'ok', first_hook_id, rows_per_hook, now_ms, id of hook 1 … hook n}
--          (a repeated key answers the first hook's id; first_hook_id is hook 1's id)
--          with 'events': {'ok', first_hook_id, rows of hook 1, now_ms, id of hook 1 … hook n,
--          rows of hook 1 … hook n} (a hook with 0 rows matched no entry: not stored)
--       |  {'replica_lost', replicas attached, replicas wanted}: this server lost a replica
--          the leader's term counted, most likely to a failover, or has fewer attached than
--          the sentinels know alive (`expected`, a primary just promoted); retry (see
--          prelude.lua)
--       |  {'not_primary', the primary the sentinels name}: the sentinels name another
--          primary (a worker marked this server `deposed`, see prelude.lua): they will make
--          this server a replica and throw away what it took; nothing written, reconnect
--          through the sentinels and retry
--       |  {'unknown_source'} | {'too_large', index, size, limit} | {'bad_request', detail}
--       |  {'reserved_header', index, name}: a producer header named webhook-* or ankusa-*
--          (the delivery's own headers), refused here so every language's producer is covered
--       |  {'too_late', index, ms ahead, max_delay_ms}: a hook scheduled further ahead than
--          the leader's `commit.max_delay_ms`
--       |  {'quota', 'bytes' | 'hooks', held, adding, max}: the 'quota' option refused the
--          call (nothing written)
-- Scheduled hooks: each of the hook's rows is due at its time (score = that ms) instead of
-- now, and leaves the source's virtual time alone (a far-off row must not hold back the
-- source's next rows). The hook keeps the time as `da`, with `m` (rows made) for cancel.lua;
-- an ordered row that heads its lane holds the lane until then, and a scheduled member is
-- due at its time when promoted (prelude `promote`).
-- Nothing is written unless every check passed (Redis does not roll back a failed script).
-- The script checks its input itself, trusting no caller: KEYS[1] must be the
-- lease key of the prefix ARGV[1] (`ankusa:{…}:`), tenant and source ids must match
-- `[A-Za-z0-9_.-]{1,128}` (so they are valid UTF-8), and the size limit is the leader's
-- `commit.max_hook_bytes` kept in `settings` (10 MiB until a leader wrote it), or ARGV[4]
-- when that is lower.
-- Fairness across a tenant's sources: a row's score in `due:<tenant>` is
-- its virtual start time, not the commit time: max(the tenant's oldest due score or now,
-- the source's last virtual time) plus 1 µs per row before it (`srcvt:<tenant>`, field
-- source). A source with a backlog has its new rows queued behind its own backlog, while a
-- source with none lands at the head of the tenant's line, so the claim, which takes a
-- tenant's rows oldest first, interleaves the sources. Every score is still <= now unless
-- one source has over a million rows waiting (a 1 s spread), so nothing waits for it.
-- Ordered sink entries (the source's `lanes` field, one spec per entry: '' unordered,
-- 'h:<header name>' or 'j:<JSON pointer>'): the row becomes its lane's head when the lane
-- is idle, else it is appended behind it as a member.
-- The body bytes of the hooks stored are added to the tenant's count (`tenant_bytes`).
-- Gates (the source's `gates` field, one per entry: true, false = disabled, a list of
-- event type patterns, or an object with patterns `t` and a content predicate `m`, see
-- `gate_ok` below): a hook makes rows only for the entries whose gate it passes; its
-- `n` counts those rows. A hook passing none is not stored, and counted in stats
-- `unmatched`. Without `gates` every entry takes every hook.
local tenant, source = ARGV[2], ARGV[3]
local n = tonumber(ARGV[5])
if not n or n < 1 or #ARGV < 5 + 2 * n then return {'bad_request', 'argument count'} end
if not string.match(P, '^ankusa:{[^{}]+}:$') or KEYS[1] ~= K_LEASE then
  return {'bad_request', 'KEYS[1] must be the lease key of the prefix ARGV[1]'}
end
local function valid_id(id)
  return #id >= 1 and #id <= 128 and not string.find(id, '[^A-Za-z0-9_.%-]')
end
if not valid_id(tenant) then return {'bad_request', 'tenant id must match [A-Za-z0-9_.-]{1,128}'} end
if not valid_id(source) then return {'bad_request', 'source id must match [A-Za-z0-9_.-]{1,128}'} end
local max_bytes = tonumber(redis.call('HGET', K_SETTINGS, 'max_hook_bytes') or '') or 10485760
local asked = tonumber(ARGV[4])
if asked and asked < max_bytes then max_bytes = asked end
local idem_ttl, idem, only, events, quota = nil, nil, nil, nil, nil
-- Scheduled hooks: sched[i] = {'deliver_at' | 'delay', ms}.
local sched = nil
local o = 6 + 2 * n
-- Options are checked here, before the first write: a TTL that `SET … PX` refuses would
-- otherwise fail the script after a hook's hash and body were written (orphans).
while o <= #ARGV do
  if ARGV[o] == 'idem' and tonumber(ARGV[o + 1]) and o + 1 + n <= #ARGV then
    idem_ttl, idem = tonumber(ARGV[o + 1]), {}
    if idem_ttl < 1 or idem_ttl ~= math.floor(idem_ttl) or idem_ttl >= 2^53 then
      return {'bad_request', 'idem ttl_ms must be a whole number of milliseconds, 1 or more'}
    end
    for i = 1, n do idem[i] = ARGV[o + 1 + i] end
    o = o + 2 + n
  elseif ARGV[o] == 'events' and o + n <= #ARGV then
    -- Event types as model::check_event_type: '' (none) or 1..=128 bytes of [A-Za-z0-9_.:/-].
    events = {}
    for i = 1, n do
      local et = ARGV[o + i]
      if #et > 128 or string.find(et, '[^A-Za-z0-9_.:/%-]') then
        return {'bad_request', 'event type of hook ' .. i .. ' must be 1..=128 bytes of [A-Za-z0-9_.:/-]'}
      end
      events[i] = et
    end
    o = o + 1 + n
  elseif (ARGV[o] == 'deliver_at' or ARGV[o] == 'delay') and o + n <= #ARGV then
    local word = ARGV[o]
    sched = sched or {}
    for i = 1, n do
      local v = ARGV[o + i]
      if v ~= '' then
        local x = tonumber(v)
        if not x or x < 0 or x ~= math.floor(x) or x >= 2^53 or not string.match(v, '^%d+$') then
          return {'bad_request', word .. ' of hook ' .. i .. ' must be a whole number of milliseconds, 0 or more'}
        end
        if sched[i] then
          return {'bad_request', 'hook ' .. i .. ' has both deliver_at and delay: give one'}
        end
        sched[i] = {word, x}
      end
    end
    o = o + 1 + n
  elseif ARGV[o] == 'quota' and tonumber(ARGV[o + 1]) and tonumber(ARGV[o + 2]) then
    quota = {tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2])}
    o = o + 3
  elseif ARGV[o] == 'sink' and tonumber(ARGV[o + 1]) then
    only = tonumber(ARGV[o + 1])
    o = o + 2
  else
    return {'bad_request', 'argument count'}
  end
end
local named = deposed()
if named then return {'not_primary', named} end
local replicas, replid = replication()
local want = tonumber(redis.call('HGET', K_REPLICATION, 'replicas') or '') or 0
if replicas < want then return {'replica_lost', replicas, want} end
-- Fewer replicas attached than the sentinels know alive (`expected`, lease.lua): this is a
-- primary just promoted whose old primary is not converted and synced yet; a commit only
-- it holds would be lost if it failed before that. Refused, retryable, nothing written.
local expected = tonumber(redis.call('HGET', K_REPLICATION, 'expected') or '') or 0
if replicas < expected then return {'replica_lost', replicas, expected} end
local src = redis.call('HMGET', k_source(tenant, source), 'modules', 'lanes', 'gates')
local modules, lanes_json, gates_json = src[1], src[2], src[3]
if not modules then return {'unknown_source'} end
local sinks = 0
for _ in string.gmatch(modules, '[^,]+') do sinks = sinks + 1 end
for i = 1, n do
  local size = #ARGV[4 + 2 * i]
  if size > max_bytes then return {'too_large', i, size, max_bytes} end
  local headers = ARGV[5 + 2 * i]
  if headers ~= '' then
    -- Headers that are no JSON object are left to the attempt (dead-lettered unsent there).
    local ok, h = pcall(cjson.decode, headers)
    if not ok or type(h) ~= 'table' then h = {} end
    for k, _ in pairs(h) do
      local l = string.lower(tostring(k))
      if string.sub(l, 1, 8) == 'webhook-' or string.sub(l, 1, 7) == 'ankusa-' then
        return {'reserved_header', i, tostring(k)}
      end
    end
  end
end
local lanes = nil
if lanes_json then
  local ok, v = pcall(cjson.decode, lanes_json)
  if not ok or type(v) ~= 'table' then return {'bad_request', 'source lanes field is not a JSON array'} end
  lanes = v
end
local gates = nil
if gates_json then
  local ok, v = pcall(cjson.decode, gates_json)
  if not ok or type(v) ~= 'table' then return {'bad_request', 'source gates field is not a JSON array'} end
  gates = v
end
local now = now_ms()
-- When each scheduled hook is due (ms, Redis clock); nil: now (a time not after now too).
local due_at = {}
if sched then
  local max_delay = tonumber(redis.call('HGET', K_SETTINGS, 'max_delay_ms') or '') or 2592000000
  for i = 1, n do
    local s = sched[i]
    if s then
      local at = s[2]
      if s[1] == 'delay' then at = now + s[2] end
      if at > now then
        if at - now > max_delay then return {'too_late', i, at - now, max_delay} end
        due_at[i] = at
      end
    end
  end
end
if only and (only < 0 or only >= sinks or only ~= math.floor(only)) then return {'bad_request', 'no sink entry ' .. only} end
if sinks == 0 then return {'ok', 0, 0, now} end
local ids, fresh, alias = {}, {}, {}
-- Filters (filter.rs, `EventFilter::matches_hook` decides the same): a gate is true, false,
-- an array of event type patterns, or {t = patterns (optional), m = predicate (optional)}.
-- The dot-separated segments of an event type or pattern.
local function segments(s)
  local out, pos = {}, 1
  while true do
    local d = string.find(s, '.', pos, true)
    if not d then
      out[#out + 1] = string.sub(s, pos)
      return out
    end
    out[#out + 1] = string.sub(s, pos, d - 1)
    pos = d + 1
  end
end
-- One pattern against an event type: exact; `*` for any one segment; a trailing `.*` for
-- the prefix itself and anything below; `*` alone for every type.
local function pattern_ok(p, et)
  if p == '*' then return true end
  if not string.find(p, '*', 1, true) then return p == et end
  local ps, es = segments(p), segments(et)
  local fixed, rest = #ps, false
  if #ps >= 2 and ps[#ps] == '*' then fixed, rest = #ps - 1, true end
  if (rest and #es < fixed) or ((not rest) and #es ~= fixed) then return false end
  for k = 1, fixed do
    if ps[k] ~= '*' and ps[k] ~= es[k] then return false end
  end
  return true
end
local function types_ok(patterns, et)
  if et == '' then return false end
  for _, p in ipairs(patterns) do
    if pattern_ok(p, et) then return true end
  end
  return false
end
-- The largest body a body predicate examines (filter::FILTER_BODY_MAX_BYTES).
local FILTER_BODY_MAX = 65536
-- A body read as JSON exactly where the worker's reader (serde_json, which applies the
-- filters again when it binds a row) reads it, so the two never disagree on a hook (a row
-- made here and dropped there): no more than 127 levels, no Infinity, NaN or hex numbers
-- (cjson's settings for every script of this Redis's Lua), no number beyond a double, no
-- invalid UTF-8, no raw control character inside a string. nil: not JSON.
local function has_huge(v)
  if type(v) == 'number' then return v == math.huge or v == -math.huge end
  if type(v) == 'table' then
    for k, x in pairs(v) do
      if has_huge(x) then return true end
    end
  end
  return false
end
local function strict_json(body)
  if string.find(body, '[%z\1-\8\11\12\14-\31]') then return nil end
  if string.find(body, '[\128-\255]') then
    -- Every valid UTF-8 sequence replaced by an ASCII byte (never joining its neighbours):
    -- any byte >= 128 left is invalid.
    local rest = body
    for _, seq in ipairs({'[\194-\223][\128-\191]', '\224[\160-\191][\128-\191]',
        '[\225-\236\238\239][\128-\191][\128-\191]', '\237[\128-\159][\128-\191]',
        '\240[\144-\191][\128-\191][\128-\191]', '[\241-\243][\128-\191][\128-\191][\128-\191]',
        '\244[\128-\143][\128-\191][\128-\191]'}) do
      rest = string.gsub(rest, seq, 'u')
    end
    if string.find(rest, '[\128-\255]') then return nil end
  end
  -- A tab, CR or LF is whitespace between tokens but refused inside a string: walk the
  -- strings (quote to unescaped quote) when the body has any.
  local ctl = string.find(body, '[\t\n\r]')
  local pos = 1
  while ctl do
    local q = string.find(body, '"', pos, true)
    if not q then break end
    local i = q + 1
    while true do
      local j = string.find(body, '["\\]', i)
      if not j then return nil end
      if ctl < i then
        ctl = string.find(body, '[\t\n\r]', i)
        if not ctl then break end
      end
      if ctl < j then return nil end
      if string.byte(body, j) == 92 then i = j + 2 else pos = j + 1; break end
    end
  end
  cjson.decode_invalid_numbers(false)
  cjson.decode_max_depth(127)
  local ok, v = pcall(cjson.decode, body)
  if not ok then return nil end
  -- Past a double's range (1e400) cjson reads infinity where serde refuses: only a number
  -- with an exponent of 3 digits or over 300 digits can be.
  if (string.find(body, '[eE][+]?%d%d%d') or string.find(body, string.rep('%d', 300)))
      and has_huge(v) then
    return nil
  end
  return {v}
end
-- The value at an RFC 6901 pointer (nil: absent); array tokens are decimal indexes.
local function json_at(v, ptr)
  if ptr == '' then return v end
  for seg in string.gmatch(string.sub(ptr, 2) .. '/', '([^/]*)/') do
    seg = string.gsub(string.gsub(seg, '~1', '/'), '~0', '~')
    if type(v) ~= 'table' then return nil end
    if v[seg] ~= nil then
      v = v[seg]
    elseif string.match(seg, '^%d+$') and (seg == '0' or string.sub(seg, 1, 1) ~= '0') then
      v = v[tonumber(seg) + 1]
      if v == nil then return nil end
    else
      return nil
    end
  end
  return v
end
local function scalar_eq(a, b)
  return type(a) == type(b) and type(a) ~= 'table' and a == b
end
-- A header value read as a number for gt/lt (no hex, inf or nan, as Rust's f64 parse).
local function header_number(s)
  local t = string.match(s, '^%s*(.-)%s*$')
  if string.find(t, '[xXnN]') then return nil end
  return tonumber(t)
end
-- Whether predicate `p` holds for hook `i` (`cache` keeps its decoded body and headers).
local function pred_ok(p, i, cache)
  if p.all then
    for _, q in ipairs(p.all) do
      if not pred_ok(q, i, cache) then return false end
    end
    return true
  end
  if p.any then
    for _, q in ipairs(p.any) do
      if pred_ok(q, i, cache) then return true end
    end
    return false
  end
  if p['not'] ~= nil then return not pred_ok(p['not'], i, cache) end
  local v
  if p.body then
    if cache.f == nil then
      cache.f = false
      local body = ARGV[4 + 2 * i]
      if #body <= FILTER_BODY_MAX then cache.f = strict_json(body) or false end
    end
    if not cache.f then return false end
    v = json_at(cache.f[1], p.body)
  elseif p.header then
    if cache.h == nil then
      local ok, h = pcall(cjson.decode, ARGV[5 + 2 * i])
      cache.h = (ok and type(h) == 'table') and h or false
    end
    if cache.h then
      local want = string.lower(p.header)
      for k, hv in pairs(cache.h) do
        if string.lower(tostring(k)) == want then
          if type(hv) == 'string' then v = hv else v = cjson.encode(hv) end
          break
        end
      end
    end
  else
    return false
  end
  if p.exists ~= nil then return (v ~= nil) == p.exists end
  if v == nil then return false end
  if p.eq ~= nil then return scalar_eq(v, p.eq) end
  if p.ne ~= nil then return not scalar_eq(v, p.ne) end
  if p['in'] then
    for _, w in ipairs(p['in']) do
      if scalar_eq(v, w) then return true end
    end
    return false
  end
  if p.prefix then return type(v) == 'string' and string.sub(v, 1, #p.prefix) == p.prefix end
  if type(v) == 'string' and p.header then v = header_number(v) end
  if type(v) ~= 'number' then return false end
  if p.gt then return v > p.gt end
  if p.lt then return v < p.lt end
  return false
end
-- Whether hook `i` gets a row of entry `idx` (0-based).
local caches = {}
local function gate_ok(idx, i)
  if only then return true end -- resend asks for one entry by name
  if not gates then return true end
  local g = gates[idx + 1]
  if g == nil or g == true or g == cjson.null then return true end
  if g == false or type(g) ~= 'table' then return false end
  local et = events and events[i] or ''
  if g[1] ~= nil then return types_ok(g, et) end
  if g.t and not types_ok(g.t, et) then return false end
  if g.m then
    caches[i] = caches[i] or {}
    return pred_ok(g.m, i, caches[i])
  end
  return g.t ~= nil
end
-- Rows each hook gets (`rows[i]`) and which entries (`takes[i][idx]`), decided before any
-- write.
local rows, takes = {}, {}
for i = 1, n do
  local c, t = 0, {}
  for idx = (only or 0), (only or sinks - 1) do
    t[idx] = gate_ok(idx, i)
    if t[idx] then c = c + 1 end
  end
  rows[i], takes[i] = c, t
end
-- The reply: with 'events' every hook's id and rows; else the (uniform) rows of hook 1.
local function reply(first_id)
  local out = {'ok', first_id, rows[1], now}
  if idem or events then
    for i = 1, n do out[#out + 1] = ids[i] end
  end
  if events then
    for i = 1, n do out[#out + 1] = rows[i] end
  end
  out[#out + 1] = replicas
  return out
end
-- Idempotency: which hooks were committed already (by an earlier call or earlier in this one).
if idem then
  local seen = {}
  for i = 1, n do
    local k = idem[i]
    if k ~= '' then
      if seen[k] then
        alias[i] = seen[k]
      else
        ids[i] = tonumber(redis.call('GET', k_idem(tenant, source, k)))
        if not ids[i] then seen[k] = i end
      end
    end
    if not ids[i] and not alias[i] then fresh[#fresh + 1] = i end
  end
  if #fresh == 0 then
    for i, j in pairs(alias) do ids[i] = ids[j] end
    return reply(ids[1])
  end
else
  for i = 1, n do fresh[i] = i end
end

-- The lane key of a hook for one spec; a missing key is the default lane ''.
local function scalar(v)
  if type(v) == 'string' then return v end
  if type(v) == 'number' then
    if v == math.floor(v) and math.abs(v) < 2^53 then return string.format('%d', v) end
    return string.format('%.17g', v)
  end
  if type(v) == 'boolean' then return tostring(v) end
  if v == nil or v == cjson.null then return '' end
  return cjson.encode(v)
end
local function lane_key(spec, body, headers, cache)
  local kind, arg = string.sub(spec, 1, 1), string.sub(spec, 3)
  if kind == 'c' then return '' end
  if kind == 'h' then
    if cache.h == nil then
      local ok, v = pcall(cjson.decode, headers)
      cache.h = (ok and type(v) == 'table') and v or false
    end
    if not cache.h then return '' end
    for k, v in pairs(cache.h) do
      if string.lower(k) == arg then return scalar(v) end
    end
    return ''
  end
  if cache.j == nil then
    -- A body over the bound body predicates have is not decoded (a 10 MiB decode would
    -- block Redis for half a second): its hook goes to the default lane.
    if #body > FILTER_BODY_MAX then
      cache.j = false
    else
      local ok, v = pcall(cjson.decode, body)
      cache.j = ok and v or false
    end
  end
  local v = cache.j
  if v == false then return '' end
  for seg in string.gmatch(arg, '/([^/]*)') do
    seg = string.gsub(string.gsub(seg, '~1', '/'), '~0', '~')
    if type(v) ~= 'table' then return '' end
    local idx = tonumber(seg)
    if v[seg] ~= nil then v = v[seg] elseif idx and v[idx + 1] ~= nil then v = v[idx + 1] else return '' end
  end
  return scalar(v)
end

-- Hook ids are unique across the instance's partitions: partition N's ids are N * 2^40 + 1,
-- + 2, … (partition 0's 1, 2, 3…, as before partitions). They are written with '%d': Lua
-- would print a number of more than 14 digits in exponent form.
local PART = tonumber(string.match(P, '%.p(%d+)}:$')) or 0
local ID_SPACE = 2 ^ 40
local function id_text(x) return string.format('%d', x) end
-- A new replication history (this server was promoted, or restarted and may have lost its
-- last writes): the ids it would issue next may have been issued already by the primary
-- it replaced. They jump 2^24 ahead, more than a primary issues before it is fenced, plus
-- an offset below 2^26 drawn from the new replication id: two histories forked from one
-- point (the promoted replica, and the old primary restarted beside it until the sentinels
-- make it a replica) would otherwise issue the same ids, and a receiver deduplicating on
-- `webhook-id` drop the surviving side's different hook. Each jump uses at most
-- 2^24 + 2^26 of the partition's 2^40 ids.
-- The tenant's quota, before the first write: what it holds and what this call would add.
if quota then
  local add_bytes, add_hooks = 0, 0
  for _, i in ipairs(fresh) do
    if rows[i] > 0 then
      add_bytes = add_bytes + #ARGV[4 + 2 * i]
      add_hooks = add_hooks + 1
    end
  end
  if add_hooks > 0 then
    local held = tonumber(redis.call('HGET', K_TENANT_BYTES, tenant) or '') or 0
    if held + add_bytes > quota[1] then return {'quota', 'bytes', held, add_bytes, quota[1]} end
    held = tonumber(redis.call('HGET', K_TENANT_HOOKS, tenant) or '') or 0
    if held + add_hooks > quota[2] then return {'quota', 'hooks', held, add_hooks, quota[2]} end
  end
end
local known = redis.call('HGET', K_REPLICATION, 'replid')
if known ~= replid then
  if known then
    local offset = (tonumber(string.sub(replid, 1, 7), 16) or 0) % (2 ^ 26)
    redis.call('INCRBY', K_SEQ, 2 ^ 24 + offset)
  end
  redis.call('HSET', K_REPLICATION, 'replid', replid)
end
local last = redis.call('INCRBY', K_SEQ, #fresh)
if last >= ID_SPACE then
  redis.call('DECRBY', K_SEQ, #fresh)
  return {'bad_request', 'this partition has used its 2^40 hook ids'}
end
local first = PART * ID_SPACE + last - #fresh + 1
local due = k_due(tenant)
local pending = {}
local vt = now
local head = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
if #head > 0 and tonumber(head[2]) < vt then vt = tonumber(head[2]) end
local svt = tonumber(redis.call('HGET', k_srcvt(tenant), source) or '')
if svt and svt > vt then vt = svt end
-- The next row's score, as text: Lua would print a number with 14 digits only.
local function next_score()
  local s = string.format('%.3f', vt)
  vt = vt + 0.001
  return s
end
local unmatched = 0
local stored_bytes = 0
local scheduled = 0
-- The earliest score given to a scheduled row: the tenant's place in line when no row of
-- the call is due now.
local first_at = nil
local any_now = false
-- A row's score: its hook's time when scheduled (noted in first_at), else the next virtual
-- time (noted in any_now).
local function row_score(i)
  local at = due_at[i]
  if at then
    if not first_at or at < first_at then first_at = at end
    return id_text(at)
  end
  any_now = true
  return next_score()
end
for f, i in ipairs(fresh) do
  local hook = first + f - 1
  ids[i] = hook
  local body, headers = ARGV[4 + 2 * i], ARGV[5 + 2 * i]
  local et = events and events[i] or ''
  local hk = k_hook(id_text(hook))
  if idem and idem[i] ~= '' then
    redis.call('SET', k_idem(tenant, source, idem[i]), id_text(hook), 'PX', idem_ttl)
  end
  if rows[i] == 0 then
    unmatched = unmatched + 1
  else
    -- The body apart: a hash of small fields stays a listpack.
    redis.call('SET', k_body(id_text(hook)), body)
    stored_bytes = stored_bytes + #body
    redis.call('HSET', hk, 'h', headers, 't', now, 'tn', tenant,
      's', source, 'k', modules, 'n', rows[i], 'z', #body)
    if et ~= '' then redis.call('HSET', hk, 'et', et) end
    if due_at[i] then
      redis.call('HSET', hk, 'da', id_text(due_at[i]), 'm', rows[i])
      scheduled = scheduled + 1
    end
  end
  local cache = caches[i] or {}
  for idx = (only or 0), (only or sinks - 1) do
   if takes[i][idx] then
    local row = id_text(hook) .. '.' .. idx
    local spec = lanes and lanes[idx + 1] or ''
    if spec == '' or spec == cjson.null then
      pending[#pending + 1] = row_score(i)
      pending[#pending + 1] = row
      if #pending >= 1000 then
        redis.call('ZADD', due, unpack(pending))
        pending = {}
      end
    else
      local lane = tenant .. ':' .. source .. ':' .. idx .. ':' .. redis.sha1hex(lane_key(spec, body, headers, cache))
      redis.call('HSET', hk, 'L' .. idx, lane)
      if redis.call('EXISTS', k_lanehead(lane)) == 1 then
        redis.call('RPUSH', k_lane(lane), row)
        redis.call('INCR', K_LANE_MEMBERS)
        redis.call('SADD', k_lanes(tenant), lane)
        redis.call('SADD', K_LANE_TENANTS, tenant)
      else
        set_head(lane, row)
        redis.call('ZADD', due, row_score(i), row)
      end
    end
   end
  end
end
if #pending > 0 then redis.call('ZADD', due, unpack(pending)) end
redis.call('HSET', k_srcvt(tenant), source, string.format('%.3f', vt))
for i, j in pairs(alias) do ids[i] = ids[j] end
-- The tenant's place in line: now, or its first scheduled row's time when no row is due now.
if first_at and not any_now then tenant_due(tenant, first_at) else tenant_due(tenant, now) end
redis.call('PUBLISH', K_WAKE, tenant)
redis.call('HINCRBY', K_STATS, 'committed', #fresh - unmatched)
if scheduled > 0 then redis.call('HINCRBY', K_STATS, 'scheduled', scheduled) end
add_bytes(K_TENANT_BYTES, tenant, stored_bytes)
add_bytes(K_TENANT_HOOKS, tenant, #fresh - unmatched)
if unmatched > 0 then redis.call('HINCRBY', K_STATS, 'unmatched', unmatched) end
return reply(ids[1])

-- settle.lua — record a batch of attempt outcomes in one call.
-- KEYS[1]  lease key (fencing)
-- ARGV[1]  prefix  ARGV[2] token  ARGV[3] epoch (informational; the claim tokens decide)
-- ARGV[4]  time budget, µs; 0 = none. Once 3/5 of it has passed (Redis
--          `TIME`, checked every 16 outcomes) the call stops taking outcomes: the first
--          `processed` are applied or skipped, the rest are left untouched (their rows stay
--          claimed under their tokens) for the caller to send again. The rest of the budget
--          covers the work per call after the outcomes (history trim, blob handover).
-- then     8 fields per outcome: op, tenant, row id, claim token, x, attempts,
--          first attempt ms, last error
--          op 'D' delivered        (the only way a row is deleted, invariant 1)
--          op 'R' retry            x = delay ms; attempts/first/error recorded on the row
--          op 'P' park             x = delay ms; attempt count unchanged
--          op 'X' dead-letter      x = reason; appended to the tenant's dead-letter stream;
--                                  an empty error takes the row's last recorded one
--          op 'G' drop             the row's hook is gone: nothing left to deliver
-- then, optionally, one last argument: the attempt history (docs/operations.md), a JSON
--          object {"age": ms, "max": hooks per tenant, "keep": true|false,
--          "rec": [[outcome index (0-based), hook id, record JSON text], …]}; each record of
--          an applied outcome is appended to its hook's `attempts` list, and with "keep" a
--          delivered hook is kept (as `kept:<hook>`) for resend; both expire after "age" and
--          the tenant's `history` index keeps at most "max" hooks; "kb" (bytes, optional,
--          0 none) bounds the partition's kept bodies: the oldest kept give way past it.
--          A kept hook is indexed in `kept_index` and its body bytes move from the tenant's
--          `tenant_bytes` to its `kept_bytes`; a deleted hook's leave `tenant_bytes`.
--          Or, with a log store, {"log": most entries of the partition's `log` stream
--          (0 none), "rec": […] as above}: nothing is kept per hook (a hook's keys are deleted
--          when it ends, as without history) and the call appends one entry to `log`, field
--          `r`: one JSON object per line, {"t": tenant, "h": hook, "a": record} per applied
--          outcome's record and {"t", "h", "e": "delivered"|"dead_lettered", "s": source,
--          "et": event type, "c": committed ms, "d": rows dead-lettered, "at": ms} per hook it
--          ended. "log" bounds the bytes of records waiting in the stream (`stats` field
--          `log_bytes`, released by the archiver): past it the call's records are dropped,
--          counted in `stats` field `log_dropped`, and delivery goes on. "kb" (bytes, 0
--          none): a hook that ends with a body of at most that many bytes (not held by
--          claim check) adds fields `b:<hook>` (the body) and `h:<hook>` (its producer
--          headers) to the entry (at most 1000 a call), counted in the same bound.
-- Returns  {'fenced'} | {'ok', applied, skipped, lanes released, processed (outcomes looked
--          at, from the first), µs this call took (Redis clock), m, then m hooks exhausted
--          (their last row ended here, one or more of their rows dead-lettered) as 9 fields
--          each: tenant, hook id, source, event type ('' none), rows dead-lettered, the
--          first 256 bytes of the body, the entry index and module of the row that ended
--          it, the time (ms, Redis clock); then claim-check refs…}
--          (up to 100 refs in `blob_retain` whose retention is over: blobs for the caller
--          to delete; the `cc` of every hook this call deleted, and the refs a
--          dead-letter purge left in `blob_gc`, go to `blob_retain` first)
-- A terminal outcome (D, X) of a lane's head releases the lane in this same call:
-- the next member becomes the head, due now. The lane is found from the row alone
-- (`head_lane`, recorded when the row became the head), so G and a row whose hook is gone
-- or malformed release their lane in this same call too.
-- An outcome applies only to the claim it answers: one whose row is not claimed under
-- its claim token (the token of the claim call that handed the row out, claim.lua) is
-- skipped, so a batch re-sent after a lost reply (or a NOSCRIPT reload) is never applied
-- twice, not even to a later claim of the same row in the same term.
local t0 = clock_us()
if fenced(ARGV[2]) then return {'fenced'} end
local budget = tonumber(ARGV[4]) or 0
local now = now_ms()
local applied, skipped = 0, 0
local counts = {D = 0, R = 0, P = 0, X = 0, G = 0}
local released = 0
local blobs = {}
-- A finished hook's claim-check blob is not deleted at once, since its pointer may
-- still wait on a queue (the SQS Extended Client's consumer deletes the payload itself): it
-- is kept for `cc_retention_ms` (settings, written by the leader; 7 days when unset; 0 =
-- never deleted by ankusa, left to the consumer or a bucket lifecycle rule).
local retention = tonumber(redis.call('HGET', K_SETTINGS, 'cc_retention_ms') or '') or 604800000
local function retain(ref)
  if retention > 0 then redis.call('ZADD', K_BLOB_RETAIN, now + retention, ref) end
end

-- Which outcomes' rows are still claimed under their claim token: one ZMSCORE per 1000.
local W = 8
local n = math.floor((#ARGV - 4) / W)
local hist, recs, touched, logcap, logkb = nil, {}, {}, nil, 0 -- logcap, logkb: bytes
if (#ARGV - 4) % W == 1 then
  local ok, v = pcall(cjson.decode, ARGV[#ARGV])
  if ok and type(v) == 'table' then
    if tonumber(v.log) then
      logcap = tonumber(v.log)
      logkb = tonumber(v.kb) or 0
    elseif tonumber(v.age) and tonumber(v.max) then
      hist = v
    end
    if hist or logcap then
      for _, r in ipairs(type(v.rec) == 'table' and v.rec or {}) do
        if type(r) == 'table' and tonumber(r[1]) then recs[tonumber(r[1])] = r end
      end
    end
  end
end
-- The delivery log's lines of this call (with a log store only), and the bodies it keeps
-- (field name, value, …).
local lines, logbodies = {}, {}
local function log_end(tenant, hook, state, h, dead)
  if not logcap then return end
  local size = tonumber(h[7])
  -- At most 1000 bodies a call (the XADD's arguments stay well inside what unpack takes).
  if logkb > 0 and size and size <= logkb and (h[6] or '') == '' and #logbodies < 4000 then
    local b = redis.pcall('GET', k_body(hook))
    if type(b) == 'string' then
      logbodies[#logbodies + 1] = 'b:' .. hook
      logbodies[#logbodies + 1] = b
      logbodies[#logbodies + 1] = 'h:' .. hook
      logbodies[#logbodies + 1] = type(h[10]) == 'string' and h[10] or ''
    end
  end
  local et = ''
  if type(h[8]) == 'string' and h[8] ~= '' then et = ',"et":' .. cjson.encode(h[8]) end
  local committed = type(h[9]) == 'string' and string.match(h[9], '^%d+$') or '0'
  dead = tonumber(dead) or 0
  if dead ~= dead or dead < 0 or dead > 1e9 then dead = 0 end
  lines[#lines + 1] = '{"t":' .. cjson.encode(tenant) .. ',"h":' .. hook .. ',"e":"' .. state
    .. '","s":' .. cjson.encode(h[4] or '') .. et .. ',"c":' .. committed
    .. ',"d":' .. string.format('%d', dead) .. ',"at":' .. now .. '}'
end
-- Writes that only add up are gathered through the call and made once at its end, one
-- command per key rather than one per hook (the history's cost per row): the
-- tenants' history index, the kept index and byte counts, the tenants' pending bytes.
-- Index a hook in its tenant's history, once per call (trimmed per tenant at the end).
local remembered = {}
local function remember(tenant, hook)
  if remembered[hook] then return end
  remembered[hook] = true
  local z = touched[tenant]
  if not z then z = {}; touched[tenant] = z end
  z[#z + 1] = now
  z[#z + 1] = hook
end
local kept_members, kept_bytes, kept_total = {}, {}, 0
local tenant_bytes, tenant_hooks = {}, {}
local function sum(t, k, n) t[k] = (t[k] or 0) + n end
-- One command per key for what was gathered: ZADD/ZREM in chunks of 500 members.
local function chunked(cmd, key, args, width)
  local step = 500 * width
  for c = 1, #args, step do
    redis.call(cmd, key, unpack(args, c, math.min(c + step - 1, #args)))
  end
end
local function flush_bytes()
  for t, b in pairs(tenant_bytes) do add_bytes(K_TENANT_BYTES, t, b) end
  for t, b in pairs(tenant_hooks) do add_bytes(K_TENANT_HOOKS, t, b) end
  tenant_bytes, tenant_hooks = {}, {}
  chunked('ZADD', K_KEPT_INDEX, kept_members, 2)
  kept_members = {}
  for t, b in pairs(kept_bytes) do add_bytes(K_KEPT_BYTES, t, b) end
  kept_bytes = {}
  if kept_total ~= 0 and redis.call('HINCRBY', K_STATS, 'kept_bytes', kept_total) < 0 then
    redis.call('HSET', K_STATS, 'kept_bytes', 0)
  end
  kept_total = 0
end
local members = {}
for j = 0, n - 1 do members[j + 1] = ARGV[6 + W * j] .. '/' .. ARGV[7 + W * j] end
local scores = {}
for c = 1, n, 1000 do
  local s = redis.call('ZMSCORE', K_CLAIMED, unpack(members, c, math.min(c + 999, n)))
  for k = 1, #s do scores[c + k - 1] = s[k] end
end

-- One row of a hook is finished: release its lane if it is the head, count it off
-- the hook, and drop the hook when no row or dead letter needs it. Returns the hook's
-- source and modules (for a dead letter's fields).
-- The hook is read and counted with pcall: one written by other means (not a hash, or
-- with counts that are not integers) was dead-lettered malformed by the worker and is
-- left as it is, since an error here would fail the batch with part of it applied.
-- Only those two errors are taken so: any other error is raised, never swallowed (with
-- `allow-oom` no write of this script is refused for memory).
local function malformed(r)
  if type(r) == 'table' and r.err then
    local e = r.err
    if string.find(e, 'WRONGTYPE', 1, true) or string.find(e, 'not an integer', 1, true) then
      return true
    end
    error(e)
  end
  return false
end
-- A terminal row that heads its lane releases it, hook or no hook.
local function release_lane(row, hint, tenant)
  local lane = head_lane_of(row, hint)
  if lane then
    promote(lane, tenant, now)
    released = released + 1
  end
end
-- Hooks whose last row this call ended, one of their rows dead-lettered (
-- `hook_exhausted`): {tenant, hook, source, event type, rows dead-lettered, body prefix,
-- the entry index and module of the row that ended it, Redis' time in ms}.
local exhausted = {}
local function body_prefix(hook, hk)
  local b = redis.pcall('GETRANGE', k_body(hook), 0, 255)
  if type(b) == 'string' and b ~= '' then return b end
  b = redis.pcall('HGET', hk, 'b')
  if type(b) == 'string' then return string.sub(b, 1, 256) end
  return ''
end
local function finish_row(hook, idx, tenant, row, dead)
  local hk = k_hook(hook)
  local h = redis.pcall('HMGET', hk, 'n', 'd', 'L' .. idx, 's', 'k', 'cc', 'z', 'et', 't', 'h')
  if malformed(h) or not h[1] then
    release_lane(row, nil, tenant)
    return '', ''
  end
  -- A readable hook names the lane of each ordered row (`L<idx>`, written at commit and
  -- never removed): a row without one is in no lane, and the lookup is skipped.
  -- Were it a head anyway (the hash rewritten by other means), the claim's lane sweep
  -- promotes past it.
  if h[3] then release_lane(row, h[3], tenant) end
  local dead_count = 0
  if h[2] then dead_count = tonumber(h[2]) or 1 end
  local left
  if not dead and dead_count == 0 and not (hist and hist.keep)
      and string.match(h[1], '^%-?%d+$') and tonumber(h[1]) <= 1 then
    -- The hook's last row: it is deleted below, so its count is not written.
    left = tonumber(h[1]) - 1
  else
    left = redis.pcall('HINCRBY', hk, 'n', -1)
    if malformed(left) then return h[4] or '', h[5] or '' end
  end
  if dead then
    dead_count = redis.pcall('HINCRBY', hk, 'd', 1)
    if malformed(dead_count) then return h[4] or '', h[5] or '' end
  end
  if left == 0 and dead_count > 0 then
    local module, m_i = '', 0
    for m in string.gmatch(h[5] or '', '[^,]+') do
      if tostring(m_i) == idx then module = m end
      m_i = m_i + 1
    end
    exhausted[#exhausted + 1] = {tenant, hook, h[4] or '', h[8] or '', dead_count,
      body_prefix(hook, hk), idx or '', module, now}
    log_end(tenant, hook, 'dead_lettered', h, dead_count)
  end
  if left <= 0 and dead_count == 0 then
    if h[6] then retain(h[6]) end
    log_end(tenant, hook, 'delivered', h, 0)
    local bytes = tonumber(h[7]) or 0
    sum(tenant_bytes, tenant, -bytes)
    sum(tenant_hooks, tenant, -1)
    if hist and hist.keep then
      local kk = k_kept(hook)
      redis.call('RENAME', hk, kk)
      redis.call('PEXPIRE', kk, hist.age)
      -- A hook committed before bodies moved apart has none (its `b` moved with the hash):
      -- then the rename fails, and nothing else needs doing.
      local kb = k_keptbody(hook)
      if not redis.pcall('RENAME', k_body(hook), kb).err then
        redis.call('PEXPIRE', kb, hist.age)
      end
      -- Indexed by when it was kept, its bytes counted (trim_kept, drop_kept).
      kept_members[#kept_members + 1] = now
      kept_members[#kept_members + 1] = hook .. ':' .. bytes .. ':' .. tenant
      sum(kept_bytes, tenant, bytes)
      kept_total = kept_total + bytes
      remember(tenant, hook)
    else
      redis.call('DEL', hk, k_body(hook))
    end
  end
  return h[4] or '', h[5] or ''
end

local done = {}
local seen = {}
local processed = n
for j = 0, n - 1 do
  if budget > 0 and j > 0 and j % 16 == 0 and (clock_us() - t0) * 5 >= budget * 3 then
    processed = j
    break
  end
  local i = 5 + W * j
  local op, tenant, row, ctok = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  local x, attempts, first, err = ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], ARGV[i + 7]
  local member = members[j + 1]
  if not ctok or tonumber(scores[j + 1]) ~= ctok or seen[member] then
    skipped = skipped + 1
  else
    seen[member] = true
    done[#done + 1] = member
    local hook, idx = split_row(row)
    local rec = recs[j]
    if rec and hook and logcap and type(rec[3]) == 'string' then
      lines[#lines + 1] = '{"t":' .. cjson.encode(tenant) .. ',"h":' .. hook .. ',"a":' .. rec[3]
        .. '}'
    elseif rec and hook and not logcap then
      local ak = k_attempts(hook)
      if redis.call('RPUSH', ak, rec[3]) > 100 then redis.call('LTRIM', ak, -100, -1) end
      redis.call('PEXPIRE', ak, hist.age)
      remember(tenant, hook)
    end
    if op == 'D' or op == 'G' then
      -- A row hash exists only after a failed attempt (op R).
      if op == 'G' or (tonumber(attempts) or 0) > 1 then redis.call('DEL', k_row(row)) end
      if hook then finish_row(hook, idx, tenant, row, false) end
    elseif op == 'R' or op == 'P' then
      local due = now + (tonumber(x) or 0)
      if op == 'R' then
        redis.call('HSET', k_row(row), 'a', attempts, 'f', first, 'e', err)
      elseif (tonumber(attempts) or 0) > 0 then
        redis.call('HSET', k_row(row), 'p', due) -- parked until (hooks show, rows list)
      end
      redis.call('ZADD', k_due(tenant), due, row)
      tenant_due(tenant, due)
    elseif op == 'X' then
      local source, modules, et = '', '', nil
      if hook then
        -- The event type goes with the dead letter, so lists show it without the hook.
        et = redis.pcall('HGET', k_hook(hook), 'et')
        source, modules = finish_row(hook, idx, tenant, row, true)
      end
      local module = ''
      local m_i = 0
      for m in string.gmatch(modules, '[^,]+') do
        if tostring(m_i) == idx then module = m end
        m_i = m_i + 1
      end
      if err == '' then
        local last = redis.pcall('HGET', k_row(row), 'e')
        if type(last) == 'string' then err = last end
      end
      local f = {'row', row, 'hook', hook or '', 'tenant', tenant,
        'source', source, 'sink', idx or '', 'module', module, 'reason', x,
        'attempts', attempts, 'first', first, 'error', err, 'at', now}
      if type(et) == 'string' and et ~= '' then f[#f + 1] = 'et'; f[#f + 1] = et end
      redis.call('XADD', k_dlq(tenant), '*', unpack(f))
      redis.call('SADD', K_DLQ_TENANTS, tenant)
      redis.call('DEL', k_row(row))
    end
    counts[op] = (counts[op] or 0) + 1
    applied = applied + 1
  end
end
for c = 1, #done, 1000 do
  redis.call('ZREM', K_CLAIMED, unpack(done, c, math.min(c + 999, #done)))
end
flush_bytes()
-- History retention: by age, then the oldest hooks past "max" lose their records. The
-- hooks popped per call are bounded by the outcomes it applied plus 100 (a
-- lowered "max" trims over several calls rather than in one long one). What the popped
-- hooks leave is deleted and uncounted in one command per key, as drop_kept would one by one.
local pops = #done + 100
local gone_keys, gone_members = {}, {}
for t, z in pairs(touched) do
  local hk = k_history(t)
  chunked('ZADD', hk, z, 2)
  redis.call('ZREMRANGEBYSCORE', hk, '-inf', now - hist.age)
  local over = math.min(redis.call('ZCARD', hk) - hist.max, pops)
  if over > 0 then
    pops = pops - over
    local gone = redis.call('ZPOPMIN', hk, over)
    for g = 1, #gone, 2 do
      local hook = gone[g]
      local kept = redis.call('HMGET', k_kept(hook), 'z', 'tn')
      if kept[2] then
        local bytes = tonumber(kept[1]) or 0
        gone_members[#gone_members + 1] = hook .. ':' .. bytes .. ':' .. kept[2]
        sum(kept_bytes, kept[2], -bytes)
        kept_total = kept_total - bytes
      end
      gone_keys[#gone_keys + 1] = k_attempts(hook)
      gone_keys[#gone_keys + 1] = k_kept(hook)
      gone_keys[#gone_keys + 1] = k_keptbody(hook)
    end
  end
end
chunked('ZREM', K_KEPT_INDEX, gone_members, 1)
for c = 1, #gone_keys, 500 do
  redis.call('DEL', unpack(gone_keys, c, math.min(c + 499, #gone_keys)))
end
flush_bytes()
-- Kept bodies past their age, then the oldest past the byte budget ("kb"), give way; as
-- many as this call kept plus 100, so the kept bytes converge to the budget.
if hist and hist.keep then
  local kb = tonumber(hist.kb)
  if kb and kb <= 0 then kb = nil end
  trim_kept(now - hist.age, kb, #done + 100)
end
if #lines > 0 then
  local payload = table.concat(lines, '\n')
  local size = #payload
  for i = 2, #logbodies, 2 do size = size + #logbodies[i] end
  local used = tonumber(redis.call('HGET', K_STATS, 'log_bytes') or '') or 0
  -- pcall: a `log` key of another type (written by other means) drops the records, never
  -- fails the call after its outcomes were applied.
  if (logcap > 0 and used + size > logcap)
      or redis.pcall('XADD', K_LOG, '*', 'r', payload, unpack(logbodies)).err then
    redis.call('HINCRBY', K_STATS, 'log_dropped', #lines)
  else
    redis.call('HINCRBY', K_STATS, 'log_bytes', size)
  end
end
if counts.D > 0 then redis.call('HINCRBY', K_STATS, 'delivered', counts.D) end
if counts.X > 0 then redis.call('HINCRBY', K_STATS, 'dead_lettered', counts.X) end
if counts.G > 0 then redis.call('HINCRBY', K_STATS, 'dropped', counts.G) end
-- Refs of hooks a dead-letter purge deleted (dlq_purge.lua) are kept like any other.
local gc = redis.call('LPOP', K_BLOB_GC, 100)
if gc then
  for _, b in ipairs(gc) do retain(b) end
end
-- Hand over up to 100 refs whose retention is over, for the caller to delete.
local old = redis.call('ZRANGEBYSCORE', K_BLOB_RETAIN, '-inf', now, 'LIMIT', 0, 100)
if #old > 0 then
  redis.call('ZREM', K_BLOB_RETAIN, unpack(old))
  for _, b in ipairs(old) do blobs[#blobs + 1] = b end
end
local out = {'ok', applied, skipped, released, processed, clock_us() - t0, #exhausted}
for _, e in ipairs(exhausted) do
  for _, f in ipairs(e) do out[#out + 1] = f end
end
for _, b in ipairs(blobs) do out[#out + 1] = b end
return out

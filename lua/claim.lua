-- claim.lua — one scan: claim up to a page of due rows, split fairly across tenants.
-- KEYS[1]  lease key (fencing)
-- ARGV[1]  prefix  ARGV[2] token  ARGV[3] epoch  ARGV[4] page (rows at most)
-- ARGV[5]  default room (rows a tenant not listed below may take)
-- ARGV[6]  s, then s tenant ids to skip (at their window)
-- then     r, then r pairs: tenant id, room (tenants whose room is below the page)
-- then     optionally the byte window: 'bytes', global room (bytes), alone (1 when
--          nothing is claimed), default tenant room (bytes), b, then b triples: tenant id,
--          room (bytes), 1 when the tenant has nothing claimed else 0
-- then     optionally the tenants' weights: 'weights', weight of a tenant not listed, w, then
--          w pairs: tenant id, weight (>= 1)
-- then     optionally the hooks to read back: 'hooks', F, then F field names, the
--          first being `b` (as hooks.lua takes them): the claimed rows' hooks are read in
--          this same call (the byte window's size of a row comes from the same read), while
--          under 3/5 of the time budget, so the caller needs no hooks.lua call for them
-- then     optionally the time budget: 'budget', µs. Once 3/5 of it has
--          passed (Redis `TIME`), the sweep stops, and the page stops after the tenant (or
--          the 32nd row of one) being claimed; a tenant not reached keeps its place in line
--          and goes first next scan. The rest of the budget covers re-filing the tenants
--          visited (two commands each, against five or more for the visit).
-- Returns  {'fenced'}
--       |  {'ok', now_ms, next_due_ms|-1, oldest_due_ms|-1, lane members|-1 (no sweep ran),
--           lanes promoted by the sweep, claim token, 1|0 (the byte window stopped a
--           tenant or the page), µs this call took (Redis clock), 1|0 (the budget stopped
--           the sweep or the page), h (hooks read back, 0 without 'hooks'), then per
--           claimed row: tenant, row id, attempts, first attempt ms|'', then h pairs: hook
--           id, and hooks.lua's answer for it (F values and the body, or {'!', error}) }
--           for the first distinct hooks of the rows in order; the caller reads the rest
-- Lane sweep, only while the partition holds any lane member (one GET otherwise):
-- a bounded random sample of lanes with members; a lane whose head is neither due nor
-- claimed (committed into while idle, or its head row was lost) gets its next member
-- promoted to head.
-- Deficit round-robin: the page is split into shares over the due tenants in proportion to
-- their weights (equal shares without weights); a tenant that filled its share may take what
-- others left, in further passes. With the byte window, each pass splits the global byte
-- room the same way: a tenant's rows stop at its byte share (but one row a pass is always
-- allowed, so every pass makes progress) and it takes more of the rest in the next pass.
-- A served tenant that still has due rows moves to the back of the index
-- (score = now + 0.999 ms), so a tenant this page did not reach goes first next scan.
-- Each claimed row is scored in `claimed` with this call's claim token (the next value of
-- `claim_seq`, above every token of an earlier term), so an outcome carrying an older
-- token, e.g. a batch re-sent after a lost reply, never applies to this claim.
local t0 = clock_us()
if fenced(ARGV[2]) then return {'fenced'} end
local ctok = redis.call('INCR', K_CLAIM_SEQ)
local page = tonumber(ARGV[4])
local default_room = tonumber(ARGV[5])
local skip = {}
local i = 6
local s = tonumber(ARGV[i])
for j = 1, s do skip[ARGV[i + j]] = true end
i = i + s + 1
local room = {}
local r = tonumber(ARGV[i])
for j = 1, r do room[ARGV[i + 2 * j - 1]] = tonumber(ARGV[i + 2 * j]) end
i = i + 2 * r + 1
-- The byte window, row by row: a row is claimed only while its hook's
-- size fits both the global room and its tenant's; the first row that does not fit stops
-- its tenant (rows stay in order), and stops the page when it is the global room that is
-- short. One hook larger than the window is claimed alone: globally when nothing is claimed
-- at all, for its tenant when the tenant has nothing claimed.
local brest, balone, bdefault = nil, false, 0
local broom, bempty = {}, {}
local budget = nil
-- Weights of the tenants (a tenant not listed: wdefault).
local wdefault, weights = 1, {}
-- The hook fields to read back ('hooks'), `z` appended; nil: none read back.
local hook_fields = nil
local function weight(t) return weights[t] or wdefault end
while ARGV[i] do
  if ARGV[i] == 'bytes' then
    brest = tonumber(ARGV[i + 1]) or 0
    balone = ARGV[i + 2] == '1'
    bdefault = tonumber(ARGV[i + 3]) or 0
    local b = tonumber(ARGV[i + 4]) or 0
    for j = 1, b do
      local k = i + 4 + 3 * (j - 1)
      broom[ARGV[k + 1]] = tonumber(ARGV[k + 2]) or 0
      bempty[ARGV[k + 1]] = ARGV[k + 3] == '1'
    end
    i = i + 5 + 3 * b
  elseif ARGV[i] == 'weights' then
    wdefault = math.max(1, tonumber(ARGV[i + 1]) or 1)
    local w = tonumber(ARGV[i + 2]) or 0
    for j = 1, w do
      weights[ARGV[i + 1 + 2 * j]] = math.max(1, tonumber(ARGV[i + 2 + 2 * j]) or 1)
    end
    i = i + 3 + 2 * w
  elseif ARGV[i] == 'hooks' then
    local nf = tonumber(ARGV[i + 1]) or 0
    hook_fields = {}
    for j = 1, nf do hook_fields[j] = ARGV[i + 1 + j] end
    -- `z`, the body's length, last: the byte window reads it, the caller does not.
    hook_fields[nf + 1] = 'z'
    i = i + 2 + nf
  elseif ARGV[i] == 'budget' then
    budget = tonumber(ARGV[i + 1])
    i = i + 2
  else
    break
  end
end
-- The time budget: true once 3/5 of it has passed; sticky.
local out_of_time = false
local function over_budget()
  if budget and not out_of_time and (clock_us() - t0) * 5 >= budget * 3 then
    out_of_time = true
  end
  return out_of_time
end
local claimed_rows = 0
-- Hooks read in this call (with 'hooks'): id -> HMGET of hook_fields; or the error of a
-- hash that holds another type (a malformed hook).
local hooks_read, hook_errs = {}, {}
local function read_hook(hook)
  local f = hooks_read[hook]
  if f or hook_errs[hook] then return f end
  f = redis.pcall('HMGET', k_hook(hook), unpack(hook_fields))
  if f.err then
    hook_errs[hook] = f.err
    return nil
  end
  hooks_read[hook] = f
  return f
end
-- The size a row's hook holds in the window: the hook's `z` (its body's length).
local function row_bytes(row)
  local hook = split_row(row)
  if not hook then return 0 end
  if hook_fields then
    local f = read_hook(hook)
    if not f then return 0 end
    local z = f[#hook_fields]
    if z then return tonumber(z) or 0 end
    if f[1] then return #f[1] end
    return 0
  end
  local z = redis.pcall('HGET', k_hook(hook), 'z')
  if type(z) == 'table' then return 0 end
  if z then return tonumber(z) or 0 end
  local len = redis.pcall('HSTRLEN', k_hook(hook), 'b')
  return tonumber(len) or 0
end

local now = now_ms()
-- Due means scored before the next millisecond: commit spreads one call's rows over
-- fractions of a ms (per-source virtual time, 1 µs a row) to order them, not to delay them.
local horizon = '(' .. (now + 1)
local out = {'ok', now, -1, -1, -1, 0, ctok, 0, 0, 0, 0}
local oldest = -1

local members = tonumber(redis.call('GET', K_LANE_MEMBERS) or '0') or 0
if members > 0 then
  local promoted = 0
  for _, t in ipairs(redis.call('SRANDMEMBER', K_LANE_TENANTS, 8)) do
    local lanes = redis.call('SRANDMEMBER', k_lanes(t), 32)
    if #lanes == 0 then redis.call('SREM', K_LANE_TENANTS, t) end
    for _, lane in ipairs(lanes) do
      local head = redis.call('GET', k_lanehead(lane))
      local alive = head and (redis.call('ZSCORE', k_due(t), head) or redis.call('ZSCORE', K_CLAIMED, t .. '/' .. head))
      if not alive and promote(lane, t, now) then promoted = promoted + 1 end
      if over_budget() then break end
    end
    if out_of_time then break end
  end
  out[5] = tonumber(redis.call('GET', K_LANE_MEMBERS) or '0') or 0
  out[6] = promoted
end

-- The due tenants, front of the line first; bounded by page + skipped.
local active = {}
if page > 0 then
  local cand = redis.call('ZRANGEBYSCORE', K_TENANTS, '-inf', horizon, 'LIMIT', 0, page + s)
  for _, t in ipairs(cand) do
    if not skip[t] and #active < page then
      local rm = room[t] or default_room
      if rm > 0 then active[#active + 1] = t end
    end
  end
end

local taken = {}
local visited, was_visited = {}, {}
-- The budget stops the page only once a tenant was visited, so every call makes progress.
local function stop_now() return #visited > 0 and over_budget() end
local left = page
local hungry = active
local page_full = false
while left > 0 and #hungry > 0 and not page_full and not stop_now() do
  local wsum = 0
  for _, t in ipairs(hungry) do wsum = wsum + weight(t) end
  -- The page left and the byte room at the start of the pass, split by weight.
  local pass_left, pass_bytes = left, brest
  local next_hungry = {}
  for _, t in ipairs(hungry) do
    if left <= 0 or page_full or stop_now() then break end
    local share = math.max(1, math.floor(pass_left * weight(t) / wsum))
    -- The tenant's byte share of this pass (none alone: the whole room is its own).
    local bshare = nil
    if pass_bytes and #hungry > 1 then bshare = math.floor(pass_bytes * weight(t) / wsum) end
    local bytes_taken = 0
    local share_stop = false
    if not was_visited[t] then
      was_visited[t] = true
      visited[#visited + 1] = t
    end
    local got = taken[t] or 0
    local want = math.min(share, left, (room[t] or default_room) - got)
    if want > 0 then
      local due = k_due(t)
      local rows = redis.call('ZRANGEBYSCORE', due, '-inf', horizon, 'WITHSCORES', 'LIMIT', 0, want)
      local n = #rows / 2
      local stopped = false
      local tb = broom[t] or bdefault
      local tempty = broom[t] == nil or bempty[t]
      local fit = 0
      local states = {}
      for j = 1, n do
        -- The budget cuts a large share every 32 rows (the first 32 are always taken), so
        -- it counts everything a row costs up to there: its size and its state.
        if j % 32 == 1 and j > 1 and over_budget() then
          stopped = true
          break
        end
        local row = rows[2 * j - 1]
        if brest then
          local z = row_bytes(row)
          local global_ok = z <= brest or (balone and claimed_rows == 0)
          local tenant_ok = z <= tb or (tempty and got + fit == 0)
          if not (global_ok and tenant_ok) then
            stopped = true
            out[8] = 1
            if not global_ok then page_full = true end
            break
          end
          -- Its byte share of the pass is used up: the rest waits for the next pass.
          if bshare and fit > 0 and bytes_taken + z > bshare then
            stopped = true
            share_stop = true
            break
          end
          bytes_taken = bytes_taken + z
          brest = (z <= brest) and (brest - z) or 0
          tb = (z <= tb) and (tb - z) or 0
          claimed_rows = claimed_rows + 1
        end
        -- A row state written by other means that cannot be read (not a hash, or an
        -- attempt count that is not a number) is deleted and the row starts over, rather
        -- than failing the scan (or outliving the row: settle deletes it by its count).
        local st = redis.pcall('HMGET', k_row(row), 'a', 'f')
        if st.err or (st[1] and not tonumber(st[1])) then
          redis.call('DEL', k_row(row))
          st = {}
        end
        fit = fit + 1
        states[fit] = st
      end
      if brest then
        broom[t] = tb
        bempty[t] = false
      end
      n = fit
      if n > 0 then
        local first_score = tonumber(rows[2])
        if oldest < 0 or first_score < oldest then oldest = first_score end
      end
      -- Move them in bulk: one ZREM and one ZADD per 500 rows.
      for c = 1, n, 500 do
        local ids, claims = {}, {}
        for j = c, math.min(c + 499, n) do
          local row = rows[2 * j - 1]
          ids[#ids + 1] = row
          claims[#claims + 1] = ctok
          claims[#claims + 1] = t .. '/' .. row
        end
        redis.call('ZREM', due, unpack(ids))
        redis.call('ZADD', K_CLAIMED, unpack(claims))
      end
      for j = 1, n do
        local st = states[j]
        out[#out + 1] = t
        out[#out + 1] = rows[2 * j - 1]
        out[#out + 1] = tonumber(st[1]) or 0
        out[#out + 1] = st[2] or ''
      end
      taken[t] = got + n
      left = left - n
      if (share_stop or (n == want and not stopped)) and taken[t] < (room[t] or default_room) then
        next_hungry[#next_hungry + 1] = t
      end
    end
  end
  hungry = next_hungry
end

-- Re-file every visited tenant: gone when empty, at the back when still due,
-- at its next due time otherwise. A tenant the budget did not let the page reach keeps its
-- place (it is due, in front of every tenant served here).
for _, t in ipairs(visited) do
  local first = redis.call('ZRANGE', k_due(t), 0, 0, 'WITHSCORES')
  if #first == 0 then
    redis.call('ZREM', K_TENANTS, t)
  else
    local at = tonumber(first[2])
    -- Behind every tenant already due, including ones committed in this same ms.
    if at < now + 1 and (taken[t] or 0) > 0 then at = now + 0.999 end
    redis.call('ZADD', K_TENANTS, at, t)
  end
end

-- When to scan next: the first tenant in line that is not at its window.
local head = redis.call('ZRANGE', K_TENANTS, 0, s, 'WITHSCORES')
for j = 1, #head / 2 do
  if not skip[head[2 * j - 1]] then
    out[3] = tonumber(head[2 * j])
    break
  end
end
out[4] = oldest
out[10] = out_of_time and 1 or 0
-- The claimed rows' hooks, read back as hooks.lua would (one round trip and the
-- byte window's `HGET z` per row less), each hook once, while under 3/5 of the budget
-- (checked every 16 hooks; not sticky: a page the claim itself took long over is read by
-- the caller with hooks.lua).
if hook_fields then
  local nf = #hook_fields - 1
  local rows_end, done, n = #out, {}, 0
  for r = 12, rows_end, 4 do
    local hook = split_row(out[r + 1])
    if hook and not done[hook] then
      if budget and n % 16 == 0 and n > 0 and (clock_us() - t0) * 5 >= budget * 3 then break end
      done[hook] = true
      local f = read_hook(hook)
      local answer
      if not f then
        answer = {'!', hook_errs[hook]}
      else
        answer = {}
        local present = false
        for k = 1, nf do
          answer[k] = f[k]
          if k > 1 and f[k] then present = true end
        end
        local body = false
        if present and not f[1] then body = redis.pcall('GET', k_body(hook)) end
        if type(body) == 'table' and body.err then
          answer = {'!', 'body ' .. body.err}
        else
          answer[nf + 1] = body
        end
      end
      out[#out + 1] = hook
      out[#out + 1] = answer
      n = n + 1
    end
  end
  out[11] = n
end
out[9] = clock_us() - t0
return out

-- pressure.lua — the spare capacity a replay may use now, read in one atomic step.
-- KEYS[1]  lease key: read to find the live leader (not fenced; read-only)
-- ARGV[1]  prefix  ARGV[2] tenants at the front of the line to look at, at most
-- Returns  {'unavailable', why}
--       |  {'ok', lag ms of the oldest due row (0 when none), window full 0|1}
-- The window state is the JSON the leader publishes under `window` with a short TTL
-- (src/worker.rs); it counts only when it comes from the leader that holds the lease
-- now (same epoch), so a dead leader's last word is never read as live.
local token = redis.call('GET', KEYS[1])
if not token then return {'unavailable', 'no live leader: nobody holds the lease'} end
local epoch = tonumber(string.match(token, ':(%d+)$'))
local raw = redis.call('GET', K_WINDOW)
if not raw then return {'unavailable', 'the leader has not published its window state'} end
local ok, st = pcall(cjson.decode, raw)
if not ok or type(st) ~= 'table' then return {'unavailable', 'unreadable window state'} end
if not st.leading or tonumber(st.epoch) ~= epoch then
  return {'unavailable', 'the window state is not from the current leader'}
end
local now = now_ms()
local limit = tonumber(ARGV[2]) or 1000
local oldest = -1
-- A tenant with a row due now sits at or before now in the line (claim and commit keep
-- its score <= its head), so the oldest due row is the head of one of these.
local front = redis.call('ZRANGEBYSCORE', K_TENANTS, '-inf', now, 'LIMIT', 0, limit)
for _, t in ipairs(front) do
  local head = redis.call('ZRANGE', k_due(t), 0, 0, 'WITHSCORES')
  if #head > 0 then
    local s = tonumber(head[2])
    if s <= now and (oldest < 0 or s < oldest) then oldest = s end
  end
end
local lag = 0
if oldest >= 0 then lag = now - oldest end
local full = 0
if st.window_full then full = 1 end
return {'ok', lag, full}

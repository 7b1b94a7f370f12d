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
local K_TENANTS = P .. 'tenants'
local K_CLAIMED = P .. 'claimed'
local K_SEQ = P .. 'seq'
local K_STATS = P .. 'stats'
local K_DLQ_TENANTS = P .. 'dlq_tenants'
local K_WAKE = P .. 'wake'

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

-- Lower a tenant's score in the active-tenant index to `due` (never raises it).
local function tenant_due(tenant, due)
  redis.call('ZADD', K_TENANTS, 'LT', due, tenant)
end

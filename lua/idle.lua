-- idle.lua — is anything claimed or due? One atomic read for tick().
-- KEYS[1]  lease key (routing only; read-only, not fenced)
-- ARGV[1]  prefix
-- Returns  {claimed rows, earliest place in line ms | -1, now ms}
-- Atomic because a claim moves rows from the due sets to `claimed` between two
-- separate reads, which would look idle.
local first = redis.call('ZRANGE', K_TENANTS, 0, 0, 'WITHSCORES')
local earliest = -1
if #first > 0 then earliest = tonumber(first[2]) end
return {redis.call('ZCARD', K_CLAIMED), earliest, now_ms()}

-- heartbeat.lua — a worker announces itself and reads how leadership is spread.
-- KEYS[1]  the instance's workers sorted set `ankusa:{<instance>}:workers` (node -> expiry ms)
-- KEYS[2]  the instance's leads hash `ankusa:{<instance>}:leads` (node -> partitions led)
-- ARGV[1]  the instance prefix `ankusa:{<instance>}:` (not a partition's: the prelude's
--          partition keys are never used here, so the call stays in the instance's slot)
-- ARGV[2]  node id  ARGV[3] ttl ms (0: the node leaves)  ARGV[4] partitions it leads now
-- Returns  {'ok', now ms, node, leads, node, leads, …}: every live worker (this one included
--          unless it left) with the partitions it said it leads
-- Expiry is by Redis' clock, so workers' clocks never matter; an expired worker (kill -9)
-- is dropped from both keys by the next heartbeat of anyone.
local node, ttl, leads = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_ms()
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for _, n in ipairs(gone) do redis.call('HDEL', KEYS[2], n) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ttl > 0 then
  redis.call('ZADD', KEYS[1], now + ttl, node)
  redis.call('HSET', KEYS[2], node, leads)
else
  redis.call('ZREM', KEYS[1], node)
  redis.call('HDEL', KEYS[2], node)
end
local out = {'ok', now}
for _, n in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  out[#out + 1] = n
  out[#out + 1] = redis.call('HGET', KEYS[2], n) or '0'
end
return out

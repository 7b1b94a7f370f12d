-- lease.lua — leader lease: acquire, renew or release.
-- KEYS[1]  lease key
-- ARGV[1]  prefix  ARGV[2] op ('acquire' | 'renew' | 'release')  ARGV[3] node id
-- ARGV[4]  token held (renew, release; '' for acquire)  ARGV[5] ttl ms
-- ARGV[6]  (acquire, renew; optional) the replicas the deployment has alive by the
--          sentinels ('' unknown, 0 without sentinels): written to `expected` of
--          `replication`, below which `commit.lua` refuses
-- Returns  acquire: {'ok', token, epoch}  | {'held', holder token, pttl ms}
--          renew:   {'ok', token}        | {'lost', holder token or ''}
--                 | {'replica_lost', replicas attached, replicas the term counted}
--                 | {'deposed', the primary the sentinels name}
--                 | {'restarted', token, run id the term started on, run id now}
--          release: {'ok'}               | {'lost', holder token or ''}
-- Acquiring increments the partition's fencing epoch; the token is `<node id>:<epoch>`.
-- It also records in `claim_floor` the last claim token issued so far (at least the epoch,
-- so claims scored by epoch before claim tokens existed count as older): every row claimed
-- in an earlier term is scored at or below it, every claim of this term above.
-- A node id is unique per process start, so a lease still held under this node's id
-- is a term of this very process that ended (e.g. after Redis restarted with the
-- lease persisted): the node may take it again at once, under a new epoch, so the
-- old term's scripts are fenced exactly as another node's would be.
-- Acquiring also counts the replicas attached to this server (field `replicas` of
-- `replication`); every renewal raises the count when more are attached, and a renewal or
-- a fenced script finding fewer refuses (see `replicas_lost` in the prelude): the server
-- most likely lost its replica to a promotion. It makes the partition's message space, the
-- random part of every `webhook-id`, at the first acquisition (and again after a FLUSHALL),
-- from this server's replication id, Redis' clock and the node id.
-- A sentinel-aware worker marks a master the sentinels do not name `deposed` (prelude):
-- a renewal there refuses, so the term ends; an acquisition (made only after the worker
-- checked the sentinels name this server, `Store::primary_check`) clears the mark.
-- Acquiring records the run id of this Redis process (`INFO server`, new at every start) in
-- field `server` of `replication`; a renewal that finds another process (Redis restarted,
-- e.g. from an append-only file that may have lost its last writes) still extends the lease
-- but answers 'restarted', so the leader can settle again what it settled lately and end the
-- term: the rows the lost writes left claimed are requeued by the next one.
-- Release publishes on a channel named like the lease key, so standbys take over
-- at once instead of waiting out the ttl.
local op, node, token, ttl = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local expected = tonumber(ARGV[6] or '')
local holder = redis.call('GET', KEYS[1])
local function run_id()
  return string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') or ''
end
if op == 'acquire' then
  if holder and string.sub(holder, 1, #node + 1) ~= node .. ':' then
    return {'held', holder, redis.call('PTTL', KEYS[1])}
  end
  local epoch = redis.call('INCR', K_EPOCH)
  local seq = tonumber(redis.call('GET', K_CLAIM_SEQ) or '0') or 0
  if seq < epoch then
    seq = epoch
    redis.call('SET', K_CLAIM_SEQ, seq)
  end
  redis.call('SET', K_CLAIM_FLOOR, seq)
  local t = node .. ':' .. epoch
  redis.call('SET', KEYS[1], t, 'PX', ttl)
  local replicas, replid = replication()
  redis.call('HSET', K_REPLICATION, 'replicas', replicas)
  redis.call('HDEL', K_REPLICATION, 'deposed')
  redis.call('HSET', K_REPLICATION, 'server', run_id())
  if expected then redis.call('HSET', K_REPLICATION, 'expected', expected) end
  local space = redis.call('HGET', K_REPLICATION, 'space')
  if not space then
    space = string.sub(redis.sha1hex(replid .. ':' .. string.format('%d', clock_us()) .. ':' .. node), 1, 16)
    redis.call('HSET', K_REPLICATION, 'space', space)
  end
  return {'ok', t, epoch}
elseif op == 'renew' then
  if holder ~= token then return {'lost', holder or ''} end
  local named = deposed()
  if named then return {'deposed', named} end
  local have = replication()
  local want = tonumber(redis.call('HGET', K_REPLICATION, 'replicas') or '') or 0
  if have < want then return {'replica_lost', have, want} end
  if have > want then redis.call('HSET', K_REPLICATION, 'replicas', have) end
  if expected then redis.call('HSET', K_REPLICATION, 'expected', expected) end
  redis.call('PEXPIRE', KEYS[1], ttl)
  local was, now = redis.call('HGET', K_REPLICATION, 'server'), run_id()
  if was and was ~= now then return {'restarted', token, was, now} end
  return {'ok', token}
elseif op == 'release' then
  if holder ~= token then return {'lost', holder or ''} end
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[1], 'released')
  return {'ok'}
end
return {'bad_request', op}

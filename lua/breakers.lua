-- breakers.lua — keep the leader's breaker snapshots for the next term, fenced.
-- KEYS[1]  lease key (fencing)
-- ARGV[1]  prefix  ARGV[2] token  then pairs: sink key, snapshot ('<ms left>:<opens>',
--          or '' when the breaker closed: the field is deleted)
-- Stored as '<until unix ms>:<opens>' on this server's clock: the leader hands over only
-- what is left of the open period, so no worker's wall clock is kept (a leader hours ahead
-- would otherwise open its successors' breakers for hours).
-- Returns  {'fenced'} | {'ok'}
-- The hash `breakers` holds one field per open breaker; a new leader reads it at the start
-- of its term and starts those breakers open or half-open with one probe.
if fenced(ARGV[2]) then return {'fenced'} end
for i = 3, #ARGV - 1, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', K_BREAKERS, ARGV[i])
  else
    local left, opens = string.match(ARGV[i + 1], '^(%d+):(%d+)$')
    if left then
      redis.call('HSET', K_BREAKERS, ARGV[i], (now_ms() + tonumber(left)) .. ':' .. opens)
    end
  end
end
return {'ok'}

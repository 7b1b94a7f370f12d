-- kept.lua — drop delivered hooks kept for resend, oldest first: those past their age, then
-- the oldest while the partition's kept bytes are over a budget. The leader calls it with a
-- budget of 0 while Redis refuses commits for memory, so kept bodies give way to producers
-- (docs/runbooks.md); settle.lua applies the configured budget as it keeps hooks.
-- KEYS[1]  lease key (routing only; not fenced: kept hooks are no rows in flight)
-- ARGV[1]  prefix  ARGV[2] max age ms (those kept longer ago are dropped first)
-- ARGV[3]  budget, bytes ('' none: only the aged)  ARGV[4] most hooks dropped in this call
-- ARGV[5]  '1': drop their attempt records too (a full Redis: all of a delivered hook's
--          history gives way), else ''
-- Returns  {'ok', hooks dropped, bytes freed, kept bytes left, kept hooks left}
-- Declared allow-oom: it only deletes, and is most needed on a full Redis.
local age, budget, limit = tonumber(ARGV[2]) or 0, tonumber(ARGV[3]), tonumber(ARGV[4]) or 100
local cutoff = now_ms() - age
if age <= 0 then cutoff = 0 end
local dropped, freed = trim_kept(cutoff, budget, limit, ARGV[5] == '1')
return {'ok', dropped, freed, tonumber(redis.call('HGET', K_STATS, 'kept_bytes') or '') or 0,
  redis.call('ZCARD', K_KEPT_INDEX)}

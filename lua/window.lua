-- window.lua — publish the leader's window state for pressure() and the settings the
-- scripts keep server side, fenced.
-- KEYS[1]  lease key (fencing)
-- ARGV[1]  prefix  ARGV[2] token  ARGV[3] window state JSON ('' = none)  ARGV[4] ttl ms
-- then     optional pairs: setting name, value, written to `settings` (`max_hook_bytes`,
--          read by commit.lua; `cc_retention_ms`, read by settle.lua)
-- Returns  {'fenced'} | {'ok'}
-- Fenced like every write, so a zombie leader (paused past its lease, then resumed) can
-- never overwrite the live leader's state with its stale one.
if fenced(ARGV[2]) then return {'fenced'} end
-- An empty state writes the settings only (the start of a term, before its first claim).
if ARGV[3] ~= '' then redis.call('SET', K_WINDOW, ARGV[3], 'PX', tonumber(ARGV[4]) or 3000) end
for i = 5, #ARGV - 1, 2 do
  redis.call('HSET', K_SETTINGS, ARGV[i], ARGV[i + 1])
end
return {'ok'}

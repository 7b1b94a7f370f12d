-- window.lua — publish the leader's window state for pressure() (R21), fenced (R25).
-- KEYS[1]  lease key (fencing, R25)
-- ARGV[1]  prefix  ARGV[2] token  ARGV[3] window state JSON  ARGV[4] ttl ms
-- Returns  {'fenced'} | {'ok'}
-- Fenced like every write, so a zombie leader (paused past its lease, then resumed) can
-- never overwrite the live leader's state with its stale one (issue 17.12).
if fenced(ARGV[2]) then return {'fenced'} end
redis.call('SET', P .. 'window', ARGV[3], 'PX', tonumber(ARGV[4]) or 3000)
return {'ok'}

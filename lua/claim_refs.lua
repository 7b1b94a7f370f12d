-- claim_refs.lua — record claim-check references with their hooks, fenced.
-- KEYS[1]  lease key (fencing)
-- ARGV[1]  prefix  ARGV[2] token  then pairs: hook id, reference (`s3://…`, `file://…`)
-- Returns  {'fenced'} | {'ok', references whose hook is gone…}
-- Fenced like every write of a leader, so a zombie leader's check-in can never write into
-- a hook its successor handles. A hook that is gone is not written again
-- (an HSET would make a stray hash of it): its reference comes back for the caller to
-- delete; no pointer to it was sent, since an attempt sends one only once it is recorded.
if fenced(ARGV[2]) then return {'fenced'} end
local out = {'ok'}
for i = 3, #ARGV - 1, 2 do
  local hk = k_hook(ARGV[i])
  local r = redis.call('EXISTS', hk) == 1 and redis.pcall('HSET', hk, 'cc', ARGV[i + 1])
  if not r or (type(r) == 'table' and r.err) then out[#out + 1] = ARGV[i + 1] end
end
return out

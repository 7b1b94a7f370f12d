-- hooks.lua — read the hooks of a claimed page for delivery: per hook, the
-- fields of its hash and its body, which lives apart (`body:<hook>`) so that the hash stays
-- a listpack. One call instead of two commands per hook, under a time budget like claim
-- and settle: a page too slow to read in one call is read in several.
-- KEYS[1]  lease key (routing only: a read, not fenced)
-- ARGV[1]  prefix  ARGV[2] time budget, µs; 0 = none. Once 3/5 of it has passed (Redis
--          `TIME`, checked every 16 hooks) the call stops: it answers the first hooks only,
--          and the caller asks again for the rest (at least one hook is always read)
-- ARGV[3]  F, the number of fields  ARGV[4 .. 3+F] the field names, the first being `b`
--          (the body of a hook committed before bodies moved apart)
-- then     hook ids
-- Returns, per hook id in order, for the first ones read: {F field values (nil where
--          absent), body (nil where absent or in `b`)}; every field nil where the hook is
--          gone; or {'!', error} where its hash or body key holds another type (a
--          malformed hook).
local t0 = clock_us()
local budget = tonumber(ARGV[2]) or 0
local nf = tonumber(ARGV[3]) or 0
local fields = {}
for i = 1, nf do fields[i] = ARGV[3 + i] end
local out = {}
local first = 4 + nf
for i = first, #ARGV do
  local j = i - first
  if budget > 0 and j > 0 and j % 16 == 0 and (clock_us() - t0) * 5 >= budget * 3 then
    break
  end
  local hook = ARGV[i]
  local f = redis.pcall('HMGET', k_hook(hook), unpack(fields))
  if type(f) == 'table' and f.err then
    out[#out + 1] = {'!', f.err}
  else
    local present = false
    for k = 2, nf do if f[k] then present = true end end
    local body = false
    if present and not f[1] then body = redis.pcall('GET', k_body(hook)) end
    if type(body) == 'table' and body.err then
      out[#out + 1] = {'!', 'body ' .. body.err}
    else
      f[nf + 1] = body
      out[#out + 1] = f
    end
  end
end
return out

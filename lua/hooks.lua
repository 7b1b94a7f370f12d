-- hooks.lua — read the hooks of a claimed page for delivery in one call (issue 12): per
-- hook, the fields of its hash and its body, which lives apart (`body:<hook>`) so that the
-- hash stays a listpack. One call instead of two commands per hook.
-- KEYS[1]  lease key (routing only: a read, not fenced)
-- ARGV[1]  prefix  ARGV[2] F, the number of fields  ARGV[3 .. 2+F] the field names, the
--          first being `b` (the body of a hook committed before bodies moved apart)
-- then     hook ids
-- Returns, per hook id in order: {F field values (nil where absent), body (nil where
--          absent or in `b`)}; every field nil where the hook is gone; or {'!', error}
--          where its hash or body key holds another type (a malformed hook, R29).
local nf = tonumber(ARGV[2]) or 0
local fields = {}
for i = 1, nf do fields[i] = ARGV[2 + i] end
local out = {}
for i = 3 + nf, #ARGV do
  local hook = ARGV[i]
  local f = redis.pcall('HMGET', k_hook(hook), unpack(fields))
  if type(f) == 'table' and f.err then
    out[#out + 1] = {'!', f.err}
  else
    local present = false
    for j = 2, nf do if f[j] then present = true end end
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

-- sink_state.lua — disable or enable a source's sink entry: replace the source's spec
-- and gates if its version is still the one the caller read (compare-and-set), and append
-- the operational event to the `events` stream, in one step.
-- KEYS[1]  lease key (fencing)
-- ARGV[1]  prefix  ARGV[2] token: the leader's lease token (fenced), or '' for an operator's
--          command (`ankusa source enable`, like `source put`, needs no leader)
-- ARGV[3]  tenant  ARGV[4] source  ARGV[5] the version read  ARGV[6] the new spec JSON
-- ARGV[7]  the new gates JSON ('' = none: the field is deleted)
-- ARGV[8]  most events kept in the stream, then the event's field/value pairs
-- Returns  {'fenced'} | {'unknown_source'} | {'changed'} (the version moved: read again)
--       |  {'ok', new version, event id}
-- Nothing is written unless every check passed.
if ARGV[2] ~= '' and fenced(ARGV[2]) then return {'fenced'} end
local key = k_source(ARGV[3], ARGV[4])
local version = redis.call('HGET', key, 'version')
if not version then return {'unknown_source'} end
if version ~= ARGV[5] then return {'changed'} end
local max_len = tonumber(ARGV[8])
if not max_len or max_len < 1 or (#ARGV - 8) % 2 ~= 0 then return {'changed'} end
redis.call('HSET', key, 'spec', ARGV[6])
if ARGV[7] == '' then redis.call('HDEL', key, 'gates') else redis.call('HSET', key, 'gates', ARGV[7]) end
local v = redis.call('HINCRBY', key, 'version', 1)
local fields = {}
for i = 9, #ARGV do fields[#fields + 1] = ARGV[i] end
local id = redis.call('XADD', K_EVENTS, 'MAXLEN', '~', max_len, '*', unpack(fields))
return {'ok', v, id}

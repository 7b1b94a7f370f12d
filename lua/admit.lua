-- admit.lua — whether this partition's Redis admits a commit now. Declared `#!lua` without
-- `allow-oom`, so a full Redis (`maxmemory` reached under `noeviction`) refuses the call
-- before it runs (`OOM command not allowed…`), exactly when it refuses commit.lua's first
-- write; every worker calls it every renew interval to turn readiness red with the reason.
-- Writes nothing.
-- KEYS[1]  lease key (routing only)
-- ARGV[1]  prefix
-- Returns  {'ok'}
return {'ok'}

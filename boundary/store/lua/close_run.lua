-- close_run: an open run becomes closed for good (a closed run is never reopened).
-- A field write keeps the remaining TTL; an expired run is never re-created.
--
-- KEYS[1] = run key         tb:{run}:run
-- ARGV[1] = now, epoch ms
--
-- Returns OK closed; MISSING (or expired); UNCHANGED already closed (CODE, _prelude.lua).

local state = redis.call("HGET", KEYS[1], "state")
if not state then
  return CODE.MISSING
end
if state ~= "open" then
  return CODE.UNCHANGED
end
redis.call("HSET", KEYS[1], "state", "closed", "closed_at", ARGV[1])
return CODE.OK

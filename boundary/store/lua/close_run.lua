-- close_run: an open run becomes closed for good (a closed run is never reopened).
-- A field write keeps the remaining TTL; an expired run is never re-created.
--
-- KEYS[1] = run key         tb:{run}:run
-- ARGV[1] = now, epoch ms
--
-- Returns 1 closed; 0 missing or expired; -1 already closed.

local state = redis.call("HGET", KEYS[1], "state")
if not state then
  return 0
end
if state ~= "open" then
  return -1
end
redis.call("HSET", KEYS[1], "state", "closed", "closed_at", ARGV[1])
return 1

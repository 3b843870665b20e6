-- open_run: keep a run's policy so servers can look the run up by id.
-- The TTL is set here, once; a later close keeps the remaining TTL.
--
-- KEYS[1] = run key         tb:{run}:run
-- ARGV[1] = policy (canonical JSON of the RunContext)
-- ARGV[2] = now, epoch ms
-- ARGV[3] = TTL, ms
--
-- Returns (CODE, _prelude.lua) OK opened; UNCHANGED already open with this same policy;
-- CLOSED the run is closed; CONFLICT the run is open with another policy (never replaced: a
-- policy cannot be widened).

local state = redis.call("HGET", KEYS[1], "state")
if state then
  if state ~= "open" then
    return CODE.CLOSED
  end
  if redis.call("HGET", KEYS[1], "policy") == ARGV[1] then
    return CODE.UNCHANGED
  end
  return CODE.CONFLICT
end
redis.call("HSET", KEYS[1], "policy", ARGV[1], "state", "open", "opened_at", ARGV[2])
redis.call("PEXPIRE", KEYS[1], ARGV[3])
return CODE.OK

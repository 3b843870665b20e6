-- job_delete: removes a job that is not running, and all it kept: its hash, its report
-- lines and its entry in the jobs index.
--
-- KEYS[1] = job hash
-- KEYS[2] = job lines
-- KEYS[3] = jobs index
-- ARGV[1] = job id
--
-- Returns the job's state before ("done", "cancelled", "failed": deleted), "" no such job
-- (its index entry removed all the same), or "running": left as it is (cancel it first).

local state = redis.call("HGET", KEYS[1], "state")
if state == "running" then
  return "running"
end
redis.call("DEL", KEYS[1], KEYS[2])
redis.call("ZREM", KEYS[3], ARGV[1])
return state or ""

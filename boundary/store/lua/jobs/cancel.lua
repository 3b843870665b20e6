-- job_cancel: asks a running job to stop; each lane stops at its next checkpoint (within
-- one chunk).
--
-- KEYS[1] = job hash
--
-- Returns the job's state ("running" when the request was taken), or "" for no such job.

local state = redis.call("HGET", KEYS[1], "state")
if not state then
  return ""
end
if state == "running" then
  redis.call("HSET", KEYS[1], "cancel", "1")
end
return state

-- job_cancel: asks a running job to stop; each lane stops at its next checkpoint (within
-- one chunk). A job no worker has taken yet (no chunk started, ``taken``, and no lane that
-- asked a slot of the cap, ``lane:N:slot``) has no checkpoint coming: it ends ``cancelled``
-- here, every lane ended.
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
  local lanes = tonumber(redis.call("HGET", KEYS[1], "lanes"))
  local taken = redis.call("HGET", KEYS[1], "taken") == "1"
  for lane = 0, lanes - 1 do
    taken = taken or redis.call("HEXISTS", KEYS[1], "lane:" .. lane .. ":slot") == 1
  end
  if not taken then
    local time = redis.call("TIME")
    local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    for lane = 0, lanes - 1 do
      redis.call("HSET", KEYS[1], "lane:" .. lane .. ":ended", now)
    end
    redis.call("HSET", KEYS[1], "lanes_ended", lanes, "state", "cancelled", "finished_at", now,
      "updated_at", now)
  end
end
return state

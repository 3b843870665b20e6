-- defer: a call still waiting for a slot of its limited tool when its reap time came is not
-- lost: its reap time moves on (the reaper looks at it again then).
-- A pending entry is only moved, never added (XX); an expired record is never re-created.
--
-- KEYS[1] = record key
-- KEYS[2] = pending key     tb:{run}:pending
-- ARGV[1] = identity (run_id:tool_call_id)
-- ARGV[2] = the new reap time, ms from now
-- ARGV[3] = reap grace, ms: never later than the call's deadline + grace
--
-- Returns OK moved; else (CODE, _prelude.lua) MISSING; NOT_PROJECTING; STARTED its tool started.

local refused = not_projecting(KEYS[1])
if refused then
  return refused
end
if redis.call("HEXISTS", KEYS[1], "started_at") == 1 then
  return CODE.STARTED
end
local now = now_ms()
local reap_at = now + tonumber(ARGV[2])
local deadline = redis.call("HGET", KEYS[1], "deadline")
if deadline and deadline ~= "" and tonumber(deadline) + tonumber(ARGV[3]) < reap_at then
  reap_at = tonumber(deadline) + tonumber(ARGV[3])
end
redis.call("ZADD", KEYS[2], "XX", reap_at, ARGV[1])
return CODE.OK

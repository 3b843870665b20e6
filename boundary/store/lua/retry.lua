-- retry: attempt n of a call ended without a raw response (it timed out, or its worker was
-- lost, or its message never reached a worker); attempt n + 1 takes over the same record.
-- Same record, same ids, budgets untouched: only the attempt counts up. The old attempt's
-- heartbeats are refused from now on (heartbeat.lua answers SUPERSEDED), so it stops.
--
-- KEYS[1] = record key
-- KEYS[2] = pending key     tb:{run}:pending
-- ARGV[1] = attempt n (the one that ended)
-- ARGV[2] = the new attempt's reap time, ms from now (its queue wait and backoff included)
-- ARGV[3] = identity (run_id:tool_call_id)
-- ARGV[4] = the counter to add one to: "retries" or "redispatches"
-- ARGV[5] = reap grace, ms: the reap time is never later than the call's deadline + grace
-- ARGV[6] = the reaper's judgement time (epoch ms), or absent/"" for none: move on only while
--           the call is still due and its tool did not start since (the reaper's retry)
-- ARGV[7] = "unstarted" to move on only while attempt n's tool has not started (a re-send of
--           a message that never reached a worker), or absent/""
--
-- Returns n + 1; else (CODE, _prelude.lua) MISSING; NOT_PROJECTING; ALREADY_STORED (project
-- it instead); SUPERSEDED the record's attempt is not n (someone else moved it on); NOT_DUE
-- (ARGV[6]: the call started or its reap time moved since the reaper judged it); STARTED
-- (ARGV[7]: its tool started meanwhile).

local refused = not_projecting(KEYS[1])
if refused then
  return refused
end
if redis.call("HEXISTS", KEYS[1], "raw") == 1 then
  return CODE.ALREADY_STORED
end
local attempt = attempt_of(KEYS[1])
if attempt ~= tonumber(ARGV[1]) then
  return CODE.SUPERSEDED
end
local now = now_ms()
local late = still_due(KEYS[1], KEYS[2], ARGV[3], ARGV[6], now)
if late then
  return late
end
if ARGV[7] == "unstarted" and redis.call("HEXISTS", KEYS[1], "started_at") == 1 then
  return CODE.STARTED
end
local reap_at = now + tonumber(ARGV[2])
local deadline = redis.call("HGET", KEYS[1], "deadline")
if deadline and deadline ~= "" and tonumber(deadline) + tonumber(ARGV[5]) < reap_at then
  reap_at = tonumber(deadline) + tonumber(ARGV[5])
end
redis.call("HDEL", KEYS[1], "started_at", "heartbeat_at", "progress", "progress_message")
redis.call("HSET", KEYS[1], "attempt", attempt + 1)
redis.call("HINCRBY", KEYS[1], ARGV[4], 1)
redis.call("ZADD", KEYS[2], reap_at, ARGV[3])
return attempt + 1

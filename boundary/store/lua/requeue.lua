-- requeue: what the reaper does with a call still PROJECTING past its reap time.
-- A call whose raw response is kept lost the worker that was projecting it: it is projected
-- again (a bounded number of times) instead of sealed WORKER_LOST, and its reap time moves
-- to now + retry_after so the next reaper pass does not send it twice.
--
-- KEYS[1] = record key
-- KEYS[2] = pending key     tb:{run}:pending
-- ARGV[1] = identity (run_id:tool_call_id)
-- ARGV[2] = retry after, ms
-- ARGV[3] = most re-projections of one call
-- ARGV[4] = the reaper's judgement time (epoch ms, when it read its list), or absent/"":
--           the call is decided only while still due and its tool did not start since
--
-- Returns n >= 1: project again (the n-th re-projection); else (CODE, _prelude.lua) MISSING
-- (the pending entry is dropped); NOT_PROJECTING (dropped); NOT_DUE (ARGV[4]: left alone);
-- NO_RAW; EXHAUSTED.
-- Times are Redis TIME.

local refused = not_projecting(KEYS[1])
if refused then
  redis.call("ZREM", KEYS[2], ARGV[1])
  return refused
end
local late = still_due(KEYS[1], KEYS[2], ARGV[1], ARGV[4], now_ms())
if late then
  return late
end
if redis.call("HEXISTS", KEYS[1], "raw") == 0 then
  return CODE.NO_RAW
end
local done = tonumber(redis.call("HGET", KEYS[1], "reprojections") or "0")
if done >= tonumber(ARGV[3]) then
  return CODE.EXHAUSTED
end
-- A field write on an existing hash: the record keeps its TTL.
redis.call("HSET", KEYS[1], "reprojections", done + 1)
local now = now_ms()
redis.call("ZADD", KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
return done + 1

-- start: the execute step of attempt n claims its call just before the tool runs.
-- Stamps started_at (Redis TIME) and clears the previous attempt's progress. For a tool that
-- heartbeats, the call's reap time becomes now + heartbeat timeout: silent that long, it is
-- lost. A field write keeps the TTL; an expired record is never re-created.
--
-- KEYS[1] = record key
-- KEYS[2] = pending key     tb:{run}:pending
-- ARGV[1] = attempt n (the one the execute message was sent for)
-- ARGV[2] = heartbeat timeout, ms, or "" (the tool does not heartbeat: reap time unchanged)
-- ARGV[3] = identity (run_id:tool_call_id), the member in the pending set
--
-- Returns the start time (epoch ms, > 1) when started; 0 missing or expired; -1 not
-- PROJECTING; -2 raw response already stored; -4 the record's attempt is not n (another
-- attempt took the call over: this message is stale). A record started before under the same
-- attempt (the message came back after its worker died) is started again, counted in
-- "restarts".

local status = redis.call("HGET", KEYS[1], "status")
if not status then
  return 0
end
if status ~= "PROJECTING" then
  return -1
end
if redis.call("HEXISTS", KEYS[1], "raw") == 1 then
  return -2
end
if tonumber(redis.call("HGET", KEYS[1], "attempt") or "1") ~= tonumber(ARGV[1]) then
  return -4
end
local time = redis.call("TIME")
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if redis.call("HEXISTS", KEYS[1], "started_at") == 1 then
  redis.call("HINCRBY", KEYS[1], "restarts", 1)
end
redis.call("HDEL", KEYS[1], "heartbeat_at", "progress", "progress_message")
redis.call("HSET", KEYS[1], "started_at", now, "attempt", ARGV[1])
if ARGV[2] ~= "" then
  redis.call("ZADD", KEYS[2], "XX", now + tonumber(ARGV[2]), ARGV[3])
end
return now

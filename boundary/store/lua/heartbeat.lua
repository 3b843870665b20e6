-- heartbeat: a running tool's sign of life and progress, in its record.
-- For a tool with a heartbeat timeout, the call's reap time moves to now + that timeout.
-- A field write keeps the TTL; an expired record is never re-created.
--
-- KEYS[1] = record key
-- KEYS[2] = pending key     tb:{run}:pending
-- ARGV[1] = attempt (of the running tool)
-- ARGV[2] = fraction done, 0..1, or "" (unchanged)
-- ARGV[3] = status message (bounded, no control characters), or "" (unchanged)
-- ARGV[4] = heartbeat timeout, ms, or "" (reap time unchanged)
-- ARGV[5] = identity (run_id:tool_call_id)
--
-- Returns the write time (epoch ms, > 1); 0 missing or expired; -1 not PROJECTING (sealed:
-- the tool must stop); -4 another attempt runs the call now (this one must stop).

local status = redis.call("HGET", KEYS[1], "status")
if not status then
  return 0
end
if status ~= "PROJECTING" then
  return -1
end
if tonumber(redis.call("HGET", KEYS[1], "attempt") or "1") ~= tonumber(ARGV[1]) then
  return -4
end
local time = redis.call("TIME")
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call("HSET", KEYS[1], "heartbeat_at", now)
if ARGV[2] ~= "" then
  redis.call("HSET", KEYS[1], "progress", ARGV[2])
end
if ARGV[3] ~= "" then
  redis.call("HSET", KEYS[1], "progress_message", ARGV[3])
end
if ARGV[4] ~= "" then
  redis.call("ZADD", KEYS[2], "XX", now + tonumber(ARGV[4]), ARGV[5])
end
return now

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
-- Returns the write time (epoch ms, > 1); else (CODE, _prelude.lua) MISSING; NOT_PROJECTING
-- (sealed: the tool must stop); SUPERSEDED another attempt runs the call now (this one must
-- stop; counted in the record's stale_refusals).

local refused = not_projecting(KEYS[1])
if refused then
  return refused
end
local stale = fenced(KEYS[1], ARGV[1])
if stale then
  return stale
end
local now = now_ms()
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

-- claim: the execute step of attempt n claims its call and reads it, in one round trip.
-- Stamps started_at (Redis TIME) and clears the previous attempt's progress; for a tool that
-- heartbeats, the call's reap time becomes now + its heartbeat timeout (silent that long, it
-- is lost). A field write keeps the TTL; an expired record is never re-created.
--
-- KEYS[1] = record key
-- KEYS[2] = pending key     tb:{run}:pending
-- ARGV[1] = attempt n (the one the execute message was sent for)
-- ARGV[2] = identity (run_id:tool_call_id), the member in the pending set
-- ARGV[3], ARGV[4], ... = pairs of a tool name and its heartbeat timeout, ms: the worker's
--           tools that heartbeat (a tool not named here keeps its reap time)
--
-- Returns {now, field, value, ...}: started, now (epoch ms) and the record as HGETALL gives
-- it; else {code} (CODE, _prelude.lua): {MISSING}; {NOT_PROJECTING}; {ALREADY_STORED};
-- {SUPERSEDED} the record's attempt is not n (another attempt took the call over: this
-- message is stale); {PAST_DEADLINE} (not started). A record started before under the
-- same attempt (the message came back after its worker died) is started again, counted in
-- "restarts".

-- One read of the fields the checks below look at (not_projecting and attempt_of in
-- _prelude.lua, from it): fewer commands, the same decisions in the same order.
local read = redis.call("HMGET", KEYS[1], "status", "attempt", "deadline", "started_at",
  "tool_name")
if not read[1] then
  return {CODE.MISSING}
end
if read[1] ~= "PROJECTING" then
  return {CODE.NOT_PROJECTING}
end
if redis.call("HEXISTS", KEYS[1], "raw") == 1 then
  return {CODE.ALREADY_STORED}
end
if tonumber(read[2] or "1") ~= tonumber(ARGV[1]) then
  return {CODE.SUPERSEDED}
end
local now = now_ms()
local deadline = read[3]
if deadline and deadline ~= "" and tonumber(deadline) <= now then
  return {CODE.PAST_DEADLINE}
end
if read[4] then
  redis.call("HINCRBY", KEYS[1], "restarts", 1)
end
redis.call("HDEL", KEYS[1], "heartbeat_at", "progress", "progress_message")
redis.call("HSET", KEYS[1], "started_at", now, "attempt", ARGV[1])
local tool = read[5]
for n = 3, #ARGV - 1, 2 do
  if ARGV[n] == tool then
    redis.call("ZADD", KEYS[2], "XX", now + tonumber(ARGV[n + 1]), ARGV[2])
    break
  end
end
local reply = redis.call("HGETALL", KEYS[1])
table.insert(reply, 1, now)
return reply

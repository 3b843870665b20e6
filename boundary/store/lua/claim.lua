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

local refused = not_projecting(KEYS[1])
if refused then
  return {refused}
end
if redis.call("HEXISTS", KEYS[1], "raw") == 1 then
  return {CODE.ALREADY_STORED}
end
if attempt_of(KEYS[1]) ~= tonumber(ARGV[1]) then
  return {CODE.SUPERSEDED}
end
local now = now_ms()
local deadline = redis.call("HGET", KEYS[1], "deadline")
if deadline and deadline ~= "" and tonumber(deadline) <= now then
  return {CODE.PAST_DEADLINE}
end
if redis.call("HEXISTS", KEYS[1], "started_at") == 1 then
  redis.call("HINCRBY", KEYS[1], "restarts", 1)
end
redis.call("HDEL", KEYS[1], "heartbeat_at", "progress", "progress_message")
redis.call("HSET", KEYS[1], "started_at", now, "attempt", ARGV[1])
local tool = redis.call("HGET", KEYS[1], "tool_name")
for n = 3, #ARGV - 1, 2 do
  if ARGV[n] == tool then
    redis.call("ZADD", KEYS[2], "XX", now + tonumber(ARGV[n + 1]), ARGV[2])
    break
  end
end
local reply = redis.call("HGETALL", KEYS[1])
table.insert(reply, 1, now)
return reply

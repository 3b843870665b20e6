-- admit: a call of a limited tool asks for a slot. Calls already in line are served first
-- (a wake-up may be due), then the call takes a free slot, waits, or is refused.
-- (KEYS and ARGV[1..6]: _prelude.lua.)
--
-- ARGV[7]  = identity (run_id:tool_call_id)
-- ARGV[8]  = attempt
-- ARGV[9]  = tenant ("_" for the shared one)
-- ARGV[10] = priority (integer, higher first)
-- ARGV[11] = the run's deadline, ms, or ""
-- ARGV[12] = "new": the call's record does not exist yet (a submit admits before it
--            creates): a call that must wait is held out of line until confirm.lua puts it
--            there, so no slot is ever handed to a call whose record is not written;
--            "line": the record exists: a call that must wait joins the line at once
--
-- Returns {code, now, wake_at, grants, expired} (see pumped() in the prelude): code 1 the call
-- holds a slot now (its caller sends it; it is not among the grants), 2 it waits, 3 it
-- already holds one, 4 it already waits, -1 refused: max_waiting calls wait already.

local identity, attempt, tenant = ARGV[7], ARGV[8], ARGV[9]
if redis.call("HEXISTS", KEYS[2], identity) == 1 then
  return {3, NOW, 0, {}, {}}
end
if redis.call("HEXISTS", KEYS[5], identity) == 1 then
  return {4, NOW, 0, {}, {}}
end
local grants, expired, wake = pump()
keep()
if slot_free() and tenant_free(tenant) then
  take_slot(identity, attempt, tenant, ARGV[10])
  return {1, NOW, wake_to_schedule(wake), grants, expired}
end
if MAX_WAITING and redis.call("HLEN", KEYS[5]) >= MAX_WAITING then
  return {-1, NOW, wake_to_schedule(wake), grants, expired}
end
if ARGV[12] == "new" then
  redis.call("HSET", KEYS[5], identity,
    "u\t" .. tenant .. "\t" .. ARGV[10] .. "\t" .. attempt .. "\t" .. ARGV[11] .. "\t" .. NOW
    .. "\t")
  redis.call("ZADD", KEYS[8], NOW, identity)
  keep()
  return {2, NOW, wake_to_schedule(wake), grants, expired}
end
join_line(identity, tenant, ARGV[10], attempt, ARGV[11], NOW)
local more, late, later = pump()
keep()
for _, v in ipairs(more) do table.insert(grants, v) end
for _, v in ipairs(late) do table.insert(expired, v) end
return {2, NOW, wake_to_schedule(math.max(wake, later)), grants, expired}

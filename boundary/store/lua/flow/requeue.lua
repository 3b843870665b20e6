-- requeue: a call moves on to attempt n (a retry after a lost or timed-out attempt, or a
-- re-send of a message that never reached a tool).
-- (KEYS and ARGV[1..6]: _prelude.lua.)
--
-- ARGV[7]  = identity
-- ARGV[8]  = the new attempt
-- ARGV[9]  = tenant, ARGV[10] = priority: used when the call holds no slot and has no
--            place in line (its own are kept otherwise)
-- ARGV[11] = the run's deadline, ms, or ""
-- ARGV[12] = "keep": the attempt that never started keeps the call's slot (a re-send);
--            "again": the slot is given up and the attempt takes one like any other call
--
-- Returns {code, now, wake_at, grants, expired}: code 1 the attempt holds a slot (its caller
-- sends it; it is not among the grants), 2 it waits in line, -2 refused: a newer attempt than
-- this one holds the call's slot (fenced: nothing changed, this requeue is stale).

local identity, attempt = ARGV[7], ARGV[8]
local tenant, priority = ARGV[9], ARGV[10]
local lease = redis.call("HGET", KEYS[2], identity)
if lease then
  local parts = split(lease)
  if tonumber(parts[1]) > tonumber(attempt) then
    return {-2, NOW, 0, {}, {}}
  end
  tenant, priority = parts[2], parts[5] or priority
  if ARGV[12] == "keep" then
    local old = identity .. ":" .. parts[1]
    if redis.call("ZSCORE", KEYS[4], old) == "inf" then
      redis.call("ZREM", KEYS[4], old)
      if RATE then
        redis.call("ZADD", KEYS[4], "+inf", identity .. ":" .. attempt)
      end
    end
    redis.call("HSET", KEYS[2], identity,
      attempt .. "\t" .. tenant .. "\t" .. NOW .. "\t0\t" .. priority)
    redis.call("ZADD", KEYS[1], NOW + CHECK_MS, identity)
    keep()
    return {1, NOW, 0, {}, {}}
  end
else
  local ticket = redis.call("HGET", KEYS[5], identity)
  if ticket then
    local parts = split(ticket)
    tenant, priority = parts[2], parts[3]
  end
end
free_slot(identity)
leave_line(identity)
local grants, expired, wake = pump()
keep()
if slot_free() and tenant_free(tenant) then
  take_slot(identity, attempt, tenant, priority)
  return {1, NOW, wake_to_schedule(wake), grants, expired}
end
join_line(identity, tenant, priority, attempt, ARGV[11], NOW)
local more, late, later = pump()
keep()
for _, v in ipairs(more) do table.insert(grants, v) end
for _, v in ipairs(late) do table.insert(expired, v) end
return {2, NOW, wake_to_schedule(math.max(wake, later)), grants, expired}

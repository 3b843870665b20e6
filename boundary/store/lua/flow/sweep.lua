-- sweep: the reaper's pass over one tool's flow control. Takes out of line the waiting calls
-- whose run's deadline passed (the caller seals them), lists the slots due for a check
-- (their holder may have ended without giving them up), the calls admitted before their
-- record existed and never put in line (their submitter died, or the record was never
-- written), and the grants whose execute message failed to send; then hands out free slots
-- (a wake-up may have been lost).
-- (KEYS and ARGV[1..6]: _prelude.lua.)
--
-- ARGV[7] = most items of each list
-- ARGV[8] = age, ms, past which an admitted call not in line is looked at
--
-- Returns {due, stale, late, unsent, now, wake_at, grants, expired}: due = {identity, attempt,
-- started(0|1), ...}; stale, late, unsent = identities.

local most = tonumber(ARGV[7])
local due = {}
for _, identity in ipairs(redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", NOW, "LIMIT", 0, most)) do
  local lease = redis.call("HGET", KEYS[2], identity)
  if lease then
    local parts = split(lease)
    table.insert(due, identity)
    table.insert(due, tonumber(parts[1]))
    table.insert(due, tonumber(parts[4]))
  else
    redis.call("ZREM", KEYS[1], identity)
  end
end
local stale = redis.call("ZRANGEBYSCORE", KEYS[8], "-inf", NOW - tonumber(ARGV[8]), "LIMIT", 0, most)
local late = redis.call("ZRANGEBYSCORE", KEYS[9], "-inf", NOW, "LIMIT", 0, most)
for _, identity in ipairs(late) do
  leave_line(identity)
end
local unsent = redis.call("SPOP", KEYS[12], most)
local scheduled = tonumber(redis.call("HGET", KEYS[11], "wake_at") or "0")
if scheduled > 0 and scheduled <= NOW then
  redis.call("HDEL", KEYS[11], "wake_at")
end
local grants, expired, wake = pump()
keep()
return {due, stale, late, unsent, NOW, wake_to_schedule(wake), grants, expired}

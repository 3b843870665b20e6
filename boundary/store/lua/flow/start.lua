-- start: the tool of a rate-limited call starts now (the worker, before it claims the call).
-- Its place in the rate window, held since the grant (+inf), becomes this time: the window
-- counts real starts, so no period ever holds more than the limit's starts.
-- (KEYS and ARGV[1..6]: _prelude.lua.)
--
-- ARGV[7] = identity
-- ARGV[8] = attempt
--
-- Returns {now, wake_at}: the start time (ms, the store's clock) and a wake-up to schedule
-- (0: none), when the window is full of real starts with calls in line.

local member = ARGV[7] .. ":" .. ARGV[8]
if RATE then
  redis.call("ZADD", KEYS[4], NOW, member)
end
local lease = redis.call("HGET", KEYS[2], ARGV[7])
if lease then
  local parts = split(lease)
  if parts[1] == ARGV[8] and parts[4] ~= "1" then
    redis.call("HSET", KEYS[2], ARGV[7],
      parts[1] .. "\t" .. parts[2] .. "\t" .. parts[3] .. "\t1\t" .. (parts[5] or "0"))
  end
end
local wake = 0
if RATE and redis.call("LLEN", KEYS[7]) > 0 then
  local used, at = rate_state()
  if used >= RATE and at then
    wake = wake_to_schedule(at)
  end
end
keep()
return {NOW, wake}

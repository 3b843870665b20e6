-- pump: hands free slots to the calls in line (a scheduled wake-up, a raised limit, the
-- reaper's pass). A wake-up that has come clears its mark first.
-- (KEYS and ARGV[1..6]: _prelude.lua.)
--
-- Returns {1, now, wake_at, grants, expired}.

local scheduled = tonumber(redis.call("HGET", KEYS[11], "wake_at") or "0")
if scheduled > 0 and scheduled <= NOW then
  redis.call("HDEL", KEYS[11], "wake_at")
end
return pumped(1)

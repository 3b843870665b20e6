-- renew: the reaper found a slot's holder still running attempt n: checked again later.
-- (KEYS and ARGV[1..6]: _prelude.lua.)
--
-- ARGV[7] = identity
-- ARGV[8] = attempt n
--
-- Returns 1 renewed; 0 the slot is not held by attempt n (left alone).

local lease = redis.call("HGET", KEYS[2], ARGV[7])
if not lease or split(lease)[1] ~= ARGV[8] then
  return 0
end
redis.call("ZADD", KEYS[1], NOW + CHECK_MS, ARGV[7])
keep()
return 1

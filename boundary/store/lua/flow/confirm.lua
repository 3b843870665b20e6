-- confirm: the record of a call admitted before it existed (admit.lua "new") is written:
-- the call joins the line, and free slots are handed out (possibly to it).
-- (KEYS and ARGV[1..6]: _prelude.lua.)
--
-- ARGV[7] = identity
--
-- Returns {code, now, wake_at, grants, expired}: code 2 in line (or granted: then it is among
-- the grants), 3 it holds a slot, 0 it is neither waiting nor holding one (withdrawn,
-- cancelled or swept meanwhile).

local identity = ARGV[7]
local ticket = redis.call("HGET", KEYS[5], identity)
if not ticket then
  if redis.call("HEXISTS", KEYS[2], identity) == 1 then
    return {3, NOW, 0, {}, {}}
  end
  return pumped(0)
end
local parts = split(ticket)
if parts[1] == "u" then
  redis.call("HDEL", KEYS[5], identity)
  join_line(identity, parts[2], parts[3], parts[4], parts[5], parts[6])
end
return pumped(2)

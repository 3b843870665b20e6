-- own_run: bind an open run to the first requester that uses it over an authorized MCP
-- door, and tell later requesters whether it is theirs. A field write keeps the run's TTL.
--
-- KEYS[1] = run key         tb:{run}:run
-- ARGV[1] = owner (an opaque requester id)
--
-- Returns (CODE, _prelude.lua) OK owned now by ARGV[1]; UNCHANGED already owned by ARGV[1];
-- CLOSED the run is not open (unknown, closed or expired); CONFLICT the run is owned by
-- another requester.

local state = redis.call("HGET", KEYS[1], "state")
if state ~= "open" then
  return CODE.CLOSED
end
local owner = redis.call("HGET", KEYS[1], "owner")
if not owner then
  redis.call("HSET", KEYS[1], "owner", ARGV[1])
  return CODE.OK
end
if owner == ARGV[1] then
  return CODE.UNCHANGED
end
return CODE.CONFLICT

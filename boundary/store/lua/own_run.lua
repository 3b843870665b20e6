-- own_run: bind an open run to the first requester that uses it over an authorized MCP
-- door, and tell later requesters whether it is theirs. A field write keeps the run's TTL.
--
-- KEYS[1] = run key         tb:{run}:run
-- ARGV[1] = owner (an opaque requester id)
--
-- Returns 1 owned now by ARGV[1]; 0 already owned by ARGV[1]; -1 the run is not open
-- (unknown, closed or expired); -2 the run is owned by another requester.

local state = redis.call("HGET", KEYS[1], "state")
if state ~= "open" then
  return -1
end
local owner = redis.call("HGET", KEYS[1], "owner")
if not owner then
  redis.call("HSET", KEYS[1], "owner", ARGV[1])
  return 1
end
if owner == ARGV[1] then
  return 0
end
return -2

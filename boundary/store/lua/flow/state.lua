-- state: where one call stands at its tool's flow control, and how many calls are ahead of
-- it in line: the calls its own tenant has before it, and one per turn of every other
-- tenant until its own comes (round-robin), so a tenant's long line delays another's call
-- by at most one turn of each tenant.
-- (KEYS and ARGV[1..6]: _prelude.lua.)
--
-- ARGV[7] = identity
--
-- Returns {kind, attempt, n}: kind 1 holds a slot (n: 1 when its tool started, else 0),
-- 2 waits in line (n: calls ahead), 3 admitted, not yet in line (n: -1), 0 neither (n: -1).

local identity = ARGV[7]
local lease = redis.call("HGET", KEYS[2], identity)
if lease then
  local parts = split(lease)
  return {1, tonumber(parts[1]), tonumber(parts[4])}
end
local ticket = redis.call("HGET", KEYS[5], identity)
if not ticket then
  return {0, 0, -1}
end
local parts = split(ticket)
if parts[1] ~= "q" then
  return {3, tonumber(parts[4]), -1}
end
local tenant, member = parts[2], parts[7]
local mine = redis.call("ZLEXCOUNT", KEYS[6], "[" .. tenant .. "|", "(" .. member)
local ahead = mine
local before = true
for _, other in ipairs(redis.call("LRANGE", KEYS[7], 0, 999)) do
  if other == tenant then
    before = false
  else
    local waiting = tenant_count(other)
    ahead = ahead + math.min(waiting, mine)
    if before and waiting > mine then
      ahead = ahead + 1
    end
  end
end
return {2, tonumber(parts[4]), ahead}

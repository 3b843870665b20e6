-- withdraw: every call of one tenant waiting in line leaves it, in this one step (a cancelled
-- re-projection job's lanes at the fleet's cap of chunks: its tenant is the job), so the
-- next tenant's calls are not queued behind dead entries. Slots held are left alone: their
-- holders give them up as usual. Nothing is granted here (no slot frees).
-- (KEYS and ARGV[1..6]: _prelude.lua.)
--
-- ARGV[7] = tenant
-- ARGV[8] = most calls taken out of line in this step
--
-- Returns {identity, attempt, identity, attempt, ...}: the calls taken out of line.

local tenant = ARGV[7]
local low, high = tenant_range(tenant)
local members = redis.call("ZRANGEBYLEX", KEYS[6], low, high, "LIMIT", 0, tonumber(ARGV[8]))
local out = {}
-- A member is "tenant|priority(10)|seq(16)|identity" (join_line).
local skip = #tenant + 1 + 10 + 1 + 16 + 1
for _, member in ipairs(members) do
  local identity = string.sub(member, skip + 1)
  local ticket = redis.call("HGET", KEYS[5], identity)
  if ticket and split(ticket)[7] == member then
    local attempt = split(ticket)[4]
    leave_line(identity)
    table.insert(out, identity)
    table.insert(out, attempt)
  else
    -- A member without its ticket (never left by this code): dropped all the same.
    redis.call("ZREM", KEYS[6], member)
  end
end
if #members > 0 then
  keep()
end
return out

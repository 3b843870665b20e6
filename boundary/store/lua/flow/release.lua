-- release: a call of a limited tool ended (sealed, or withdrawn before its record was
-- written): its slot, or its place in line, is given up, and free slots go to the next
-- calls in line in this same step.
-- (KEYS and ARGV[1..6]: _prelude.lua.)
--
-- ARGV[7] = identity
-- ARGV[8] = the attempt giving the slot up (its fencing token), or absent/"" for whichever
--           holds it (the reaper, once it saw the call sealed or gone)
-- ARGV[9] = "expired": only a slot whose lease ran out (its check time, KEYS[1]'s score, is
--           past: its holder did not renew it in time), for the sweep of a reserved entry
--           whose holders have no call record; absent/"" otherwise
--
-- Returns {code, now, wake_at, grants, expired}: code 1 a slot was freed, 2 it left the line,
-- 0 it held neither, -2 refused: another attempt holds the slot or the place in line (left
-- alone: the caller is stale), -3 refused: the lease has not run out (renewed since it was
-- found expired: its holder lives; left alone; wake_at is then the lease's expiry, ms, and
-- nothing is to be scheduled). Negative codes are refusals, as admit's -1.

local identity, fence = ARGV[7], ARGV[8]

-- A lease (attempt in field 1) or a ticket (field 4) of another attempt than the fence's.
local function others(text, field)
  return text and fence and fence ~= "" and split(text)[field] ~= fence
end

if others(redis.call("HGET", KEYS[2], identity), 1)
    or others(redis.call("HGET", KEYS[5], identity), 4) then
  return pumped(-2)
end
if ARGV[9] == "expired" then
  local due = redis.call("ZSCORE", KEYS[1], identity)
  if due and tonumber(due) > NOW then
    return {-3, NOW, tonumber(due), {}, {}}
  end
end
local code = 0
if free_slot(identity) then
  code = 1
end
if leave_line(identity) then
  code = 2
end
return pumped(code)

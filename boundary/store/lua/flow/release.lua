-- release: a call of a limited tool ended (sealed, or withdrawn before its record was
-- written): its slot, or its place in line, is given up, and free slots go to the next
-- calls in line in this same step.
-- (KEYS and ARGV[1..6]: _prelude.lua.)
--
-- ARGV[7] = identity
--
-- Returns {code, now, wake_at, grants, expired}: code 1 a slot was freed, 2 it left the line,
-- 0 it held neither.

local identity = ARGV[7]
local code = 0
if free_slot(identity) then
  code = 1
end
if leave_line(identity) then
  code = 2
end
return pumped(code)

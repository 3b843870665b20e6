-- create_many: the accepted calls of one model turn, created in ONE script, in the order
-- given, each exactly as create.lua creates it one by one (duplicates, also within the turn,
-- before any budget; both budgets charged in order, so a budget that runs out part way
-- refuses the rest with the same code; sequence numbers; TTLs; reap times; indexes).
--
-- boundary/store/turns.py prefixes this file with create.lua's body wrapped as
-- ``local function create_one(KEYS, ARGV) ... end``: the rules live in create.lua alone.
-- Every key is of one run (its {run_id} hash tag), so the script is Redis Cluster safe.
--
-- KEYS[1] = the run's budget key, then KEYS[2..S] = the rest of the run's keys of create.lua
--           after the record key, in its order: pending, and on a single Redis the
--           pending-runs and runs indexes
-- KEYS[S+1..S+N] = the record key of each call, in the turn's order
-- ARGV[1] = N (calls), ARGV[2] = S (shared keys), ARGV[3] = P (create.lua's ARGV per call)
-- ARGV[4 + (i-1)*P .. 3 + i*P] = create.lua's ARGV of call i
--
-- Returns create.lua's reply of each call, in order: {CODE.OK, seq} or
-- {CODE.REFUSED, "<REASON>"}.

local n = tonumber(ARGV[1])
local shared = tonumber(ARGV[2])
local per = tonumber(ARGV[3])
local replies = {}
for i = 1, n do
  local call_keys = {KEYS[shared + i]}
  for j = 1, shared do
    call_keys[j + 1] = KEYS[j]
  end
  local call_argv = {}
  local base = 3 + (i - 1) * per
  for j = 1, per do
    call_argv[j] = ARGV[base + j]
  end
  replies[i] = create_one(call_keys, call_argv)
end
return replies

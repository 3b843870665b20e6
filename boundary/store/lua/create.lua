-- create: accept a call and write its record as PROJECTING, atomically.
-- The duplicate check, both budgets, the sequence number and the TTL happen here and only here.
--
-- KEYS[1] = record key      tb:{run}:call:<tool_call_id>
-- KEYS[2] = budget key      tb:{run}:budget
-- KEYS[3] = pending key     tb:{run}:pending
-- ARGV[1] = run_id
-- ARGV[2] = tool_call_id
-- ARGV[3] = tool_name
-- ARGV[4] = request (canonical JSON)
-- ARGV[5] = max pending, ms: how long the call may stay PROJECTING, from now (Redis TIME)
-- ARGV[6] = deadline, epoch ms, or "" for none
-- ARGV[7] = ttl, ms (> 0)
-- ARGV[8] = run budget, or -1 for no limit
-- ARGV[9] = tool budget, or -1 for no limit
-- ARGV[10] = reap grace, ms: the reaper may seal the call if it is still PROJECTING at
--            min(deadline, now + max pending) + grace
--
-- Every time here is Redis's (TIME), never the caller's clock: a submitter whose clock is
-- hours off still gets the reap time it asked for.
-- ARGV[11] = identity (run_id:tool_call_id), the member in the pending set
-- ARGV[12] = request_sha256: the call's fingerprint (boundary/fingerprint.py), kept in the
--            record and compared with the one of a record already under this id
-- KEYS[4] = pending-runs index  tb:pending-runs (optional: single-node Redis only; on a
--           cluster it is in another hash slot, so the client bumps it with its own command)
-- KEYS[5] = runs index  tb:runs (optional, with KEYS[4]; on a cluster the client runs
--           index_run.lua on it after the create)
--
-- The runs index holds each run scored by the expiry of its newest record (its run keys live
-- as long): a listing reads the members scored after now. A run's first create (seq 1) also
-- trims up to ten members scored before now: each run is added once and removes up to ten,
-- so the index stays about as large as the live runs.
--
-- Returns (CODE, _prelude.lua) {OK, seq} created; {REFUSED, "DUPLICATE"} the same call is
-- already recorded under this id; {REFUSED, "CONFLICT"} another call (other tool or other
-- arguments) is; {REFUSED, "RUN_BUDGET"}; {REFUSED, "TOOL_BUDGET"}.

-- Duplicates first, before any budget: a call made again is never charged twice.
if redis.call("EXISTS", KEYS[1]) == 1 then
  local first = redis.call("HGET", KEYS[1], "request_sha256")
  -- A record without a fingerprint was written by an earlier version: counted as the same
  -- call, so an upgrade turns no repeated call into a conflict.
  if first and first ~= "" and first ~= ARGV[12] then
    return {CODE.REFUSED, "CONFLICT"}
  end
  return {CODE.REFUSED, "DUPLICATE"}
end

local ttl = tonumber(ARGV[7])
local run_budget = tonumber(ARGV[8])
local tool_budget = tonumber(ARGV[9])
local tool_field = "tool:" .. ARGV[3]

-- Both counts in one read, checked run first, then tool.
local counts = redis.call("HMGET", KEYS[2], "calls", tool_field)
local calls = tonumber(counts[1] or "0")
if run_budget >= 0 and calls >= run_budget then
  return {CODE.REFUSED, "RUN_BUDGET"}
end
local tool_calls = tonumber(counts[2] or "0")
if tool_budget >= 0 and tool_calls >= tool_budget then
  return {CODE.REFUSED, "TOOL_BUDGET"}
end

local now = now_ms()
local reap_at = now + tonumber(ARGV[5])
if ARGV[6] ~= "" and tonumber(ARGV[6]) < reap_at then
  reap_at = tonumber(ARGV[6])
end
reap_at = reap_at + tonumber(ARGV[10])

-- Both counts charged in one write: the script is atomic, so the counts read above plus one
-- are what two HINCRBYs would give.
local seq = calls + 1
redis.call("HSET", KEYS[2], "calls", seq, tool_field, tool_calls + 1)

redis.call("HSET", KEYS[1],
  "run_id", ARGV[1],
  "tool_call_id", ARGV[2],
  "tool_name", ARGV[3],
  "status", "PROJECTING",
  "request", ARGV[4],
  "seq", seq,
  "created_at", now,
  "updated_at", now,
  "deadline", ARGV[6],
  "request_sha256", ARGV[12],
  -- The record's format (boundary/formats.py CURRENT): a reader of an older version that
  -- does not know it refuses the call (FORMAT_TOO_NEW) rather than guess.
  "format", "2")
redis.call("PEXPIRE", KEYS[1], ttl)

redis.call("ZADD", KEYS[3], reap_at, ARGV[11])

-- Run keys live at least as long as the newest record of the run.
if redis.call("PTTL", KEYS[2]) < ttl then
  redis.call("PEXPIRE", KEYS[2], ttl)
end
if redis.call("PTTL", KEYS[3]) < ttl then
  redis.call("PEXPIRE", KEYS[3], ttl)
end

-- The run into the reaper's index, after its call is written (a reaper never drops a run whose
-- pending call is about to exist). pcall: best effort, the call is created whatever happens
-- here, and a caller told otherwise would neither dispatch it nor try again under its id.
if KEYS[4] then
  redis.pcall("ZINCRBY", KEYS[4], 1, ARGV[1])
  -- No immortal key: the index lives as long as the newest record (a store with a shorter
  -- TTL never shortens it).
  local left = redis.pcall("PTTL", KEYS[4])
  if type(left) == "number" and left < ttl then
    redis.pcall("PEXPIRE", KEYS[4], ttl)
  end
end

-- The run into the runs index, scored by its newest record's expiry (never moved back: a
-- store with a shorter TTL cannot hide a longer-lived run). Best effort too (pcall).
if KEYS[5] then
  redis.pcall("ZADD", KEYS[5], "GT", now + ttl, ARGV[1])
  if redis.call("PTTL", KEYS[5]) < ttl then
    redis.call("PEXPIRE", KEYS[5], ttl)
  end
  if seq == 1 then
    local expired = redis.pcall("ZRANGE", KEYS[5], "-inf", now, "BYSCORE", "LIMIT", 0, 10)
    if #expired > 0 then
      redis.pcall("ZREM", KEYS[5], unpack(expired))
    end
  end
end

return {CODE.OK, seq}

-- seal: PROJECTING -> READY or PROJECTING -> ERROR, and nothing else.
-- Indexes the identity in the run's progress set, removes it from the pending set, counts it.
-- Never re-creates an expired key; field writes keep the remaining TTL.
--
-- KEYS[1] = record key
-- KEYS[2] = progress key    tb:{run}:progress
-- KEYS[3] = pending key     tb:{run}:pending
-- KEYS[4] = budget key      tb:{run}:budget
-- KEYS[5] = pending-runs index  tb:pending-runs (optional: single-node Redis only; on a
--           cluster it is in another hash slot and the reaper drops ended runs itself)
-- ARGV[1] = status: READY or ERROR
-- ARGV[2] = evidence status
-- ARGV[3] = agent result (canonical JSON), or "" for none
-- ARGV[4] = scope (canonical JSON), or "" for none
-- ARGV[5] = error code, or "" for none
-- ARGV[6] = unused (the caller's clock once; the time is Redis TIME)
-- ARGV[7] = identity (run_id:tool_call_id)
-- ARGV[8] = diagnostic (JSON: exception type and frame, never a message), or "" for none
-- ARGV[9] = channel to announce the seal on (tb:{run}:sealed), or absent/"" for none
-- ARGV[10] = tool_call_id, the first line of the message published on ARGV[9] (the call's
--            bounded outcome: boundary/store/seal_message.py)
-- ARGV[11] = created_at (epoch ms) of the record the caller read, or absent/"" for any: a
--            record under the same ids created at another time is another call's
-- ARGV[12] = the attempt sealing it (its fencing token), or absent/"" for no fence: a seal
--            of an attempt that is no longer the call's current one is refused
-- ARGV[13] = the reaper's judgement time (epoch ms), or absent/"" for none: seal only while
--            the call is still due and its tool did not start since (a reaper's seal)
-- ARGV[14] = projector version (ToolSpec.projector_version), or absent/"" for none
-- ARGV[15] = raw response (canonical JSON) to keep with the seal, or absent/"" for none: the
--            seal of a call projected in line (store_raw.lua's write, in the same script)
--
-- Returns (CODE, _prelude.lua) {OK, tool_name, attempt} sealed (the tool and the call's current
-- attempt, so a limited tool's slot held by that attempt can be given up); MISSING (or
-- expired); {NOT_PROJECTING, tool_name, attempt} (sealed already: maybe by this caller, whose
-- reply was lost, so it gives the slot up again); INVALID status/evidence/code disagree;
-- REPLACED not the record the caller read (ARGV[11]); SUPERSEDED another attempt has the call
-- (ARGV[12]: nothing written, counted in stale_refusals); NOT_DUE (ARGV[13]); ALREADY_STORED
-- the record holds a raw response already (ARGV[15]: nothing written).

-- The seal that empties the run's pending set drops the run from the reaper's index, so the
-- index holds only runs with calls PROJECTING. A create writes its pending entry before it
-- indexes the run (in one script), so a run with a call pending is never dropped here.
local function unindex_if_done()
  if KEYS[5] and redis.call("EXISTS", KEYS[3]) == 0 then
    -- Safe ids hold no colon: the run id is the identity up to its first one.
    redis.pcall("ZREM", KEYS[5], string.match(ARGV[7], "^[^:]*"))
  end
end

local status = ARGV[1]
local evidence = ARGV[2]
local code = ARGV[5]
if status == "READY" then
  if (evidence ~= "EVIDENCE_FOUND" and evidence ~= "NO_EVIDENCE") or code ~= "" then
    return CODE.INVALID
  end
elseif status == "ERROR" then
  if evidence ~= "ERROR" or code == "" or ARGV[3] ~= "" then
    return CODE.INVALID
  end
else
  return CODE.INVALID
end

local now = now_ms()

-- One read of every field this script looks at (the record's own fields do not change
-- below but for the sealed ones written here): fewer commands, the same decisions.
local read = redis.call("HMGET", KEYS[1], "status", "created_at", "attempt", "tool_name", "seq",
  "agent_result", "scope")
local current = read[1]
if not current then
  -- Gone (expired): nothing is written, but a pending entry for it is dropped.
  redis.call("ZREM", KEYS[3], ARGV[7])
  unindex_if_done()
  return CODE.MISSING
end
if ARGV[11] and ARGV[11] ~= "" and read[2] ~= ARGV[11] then
  return CODE.REPLACED
end
-- attempt_of (_prelude.lua), from the read above.
local attempt = tonumber(read[3] or "1")
local tool = read[4] or ""
if current ~= "PROJECTING" then
  return {CODE.NOT_PROJECTING, tool, attempt}
end
-- fenced (_prelude.lua), from the read above.
if ARGV[12] and ARGV[12] ~= "" and attempt ~= tonumber(ARGV[12]) then
  redis.call("HINCRBY", KEYS[1], "stale_refusals", 1)
  return CODE.SUPERSEDED
end
local late = still_due(KEYS[1], KEYS[3], ARGV[7], ARGV[13], now)
if late then
  return late
end

-- One write of the sealed fields (an empty argument writes nothing, as before).
local fields = {"status", status, "evidence_status", evidence, "updated_at", now}
if ARGV[15] and ARGV[15] ~= "" then
  if redis.call("HEXISTS", KEYS[1], "raw") == 1 then
    return CODE.ALREADY_STORED
  end
  table.insert(fields, "raw")
  table.insert(fields, ARGV[15])
end
local agent_result = read[6]
if ARGV[3] ~= "" then
  agent_result = ARGV[3]
  table.insert(fields, "agent_result")
  table.insert(fields, ARGV[3])
end
local scope = read[7]
if ARGV[4] ~= "" then
  scope = ARGV[4]
  table.insert(fields, "scope")
  table.insert(fields, ARGV[4])
end
if code ~= "" then
  table.insert(fields, "error_code")
  table.insert(fields, code)
end
if ARGV[8] and ARGV[8] ~= "" then
  table.insert(fields, "diagnostic")
  table.insert(fields, ARGV[8])
end
if ARGV[14] and ARGV[14] ~= "" then
  table.insert(fields, "projector_version")
  table.insert(fields, ARGV[14])
end
redis.call("HSET", KEYS[1], unpack(fields))

-- The progress member carries the record's expiry so a reader can tell expired from missing.
local pttl = redis.call("PTTL", KEYS[1])
local expires_at = now + pttl
redis.call("ZADD", KEYS[2], read[5], ARGV[7] .. ":" .. expires_at)
redis.call("ZREM", KEYS[3], ARGV[7])
unindex_if_done()
-- Counters only on a live budget key: HINCRBY on a missing key would make an immortal one.
if redis.call("EXISTS", KEYS[4]) == 1 then
  redis.call("HINCRBY", KEYS[4], "sealed:" .. status, 1)
end
if pttl > 0 and redis.call("PTTL", KEYS[2]) < pttl then
  redis.call("PEXPIRE", KEYS[2], pttl)
end
-- Last, once the record says READY/ERROR: the bounded outcome, so a waiter needs no read
-- (seal_message.py: id, TTL, created_at, attempt, status, evidence, code, scope, result, and
-- the message's format last: boundary/formats.py CURRENT).
if ARGV[9] and ARGV[9] ~= "" then
  redis.call("PUBLISH", ARGV[9], table.concat({
    ARGV[10], pttl, read[2] or "", attempt, status, evidence, code,
    scope or "", agent_result or "", "format=2"}, "\n"))
end
return {CODE.OK, tool, attempt}

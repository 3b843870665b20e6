-- The shared part of every record script (prepended to each when it is loaded, as
-- flow/_prelude.lua is to the flow scripts): the one table of return codes, the store's
-- clock and the record's status guard. Each script's own header follows it.
--
-- CODE: what a script answers when it writes nothing, the same meaning in every script
-- (boundary/store/codes.py mirrors it; a script that writes answers 1, or a time or a count,
-- always >= 1).
local CODE = {
  OK = 1,
  -- The key is missing or expired: nothing written, nothing re-created.
  MISSING = 0,
  -- The record is sealed (not PROJECTING).
  NOT_PROJECTING = -1,
  -- A raw response is kept already.
  ALREADY_STORED = -2,
  -- The record under these ids is not the one the caller read (another call since).
  REPLACED = -3,
  -- Another attempt has the call now: the caller's attempt is stale and must stop.
  SUPERSEDED = -4,
  -- The call's deadline passed.
  PAST_DEADLINE = -5,
  -- The arguments break the lifecycle table (a bug in the caller, not bad input).
  INVALID = -6,
  -- No raw response is kept (nothing to project again).
  NO_RAW = -7,
  -- The call's re-projections are used up.
  EXHAUSTED = -8,
  -- The call's tool has started.
  STARTED = -9,
  -- The run is not open (closed, or unknown).
  CLOSED = -10,
  -- The key holds someone else's value (another policy, another owner): kept.
  CONFLICT = -11,
  -- Already so (the same policy, the same owner, closed already): nothing to write.
  UNCHANGED = -12,
  -- Refused, the reason follows in the reply (create: DUPLICATE, CONFLICT, a budget).
  REFUSED = -13,
  -- Not due any more (the reaper's judgement is out of date): its reap time moved on, or its
  -- tool started after the reaper read its list.
  NOT_DUE = -14,
}

-- The store's clock (Redis TIME), epoch ms.
local function now_ms()
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The status guard of a step on a call: nil when the record is PROJECTING (go on), else the
-- code to answer (MISSING, NOT_PROJECTING).
local function not_projecting(record)
  local status = redis.call("HGET", record, "status")
  if not status then
    return CODE.MISSING
  end
  if status ~= "PROJECTING" then
    return CODE.NOT_PROJECTING
  end
  return nil
end

-- The record's current attempt (1 for a record written before attempts were counted).
local function attempt_of(record)
  return tonumber(redis.call("HGET", record, "attempt") or "1")
end

-- The fence of a holder's step: the attempt is the call's fencing token (it only counts up,
-- in retry.lua). nil when the caller's attempt (a number as text; "" or nil: no fence) is
-- the record's current one (go on); else SUPERSEDED, and the refusal is counted in the
-- record ("stale_refusals"). Call it on a PROJECTING record only (never re-creates one).
local function fenced(record, attempt)
  if attempt == nil or attempt == "" or attempt_of(record) == tonumber(attempt) then
    return nil
  end
  redis.call("HINCRBY", record, "stale_refusals", 1)
  return CODE.SUPERSEDED
end

-- The reaper's re-check: nil when the call is still due (its entry in the pending set is
-- scored at or before now) and its tool did not start at or after judged_at (epoch ms as
-- text, the store's time the reaper read its list at; "" or nil: no re-check); else NOT_DUE.
local function still_due(record, pending, identity, judged_at, now)
  if judged_at == nil or judged_at == "" then
    return nil
  end
  local reap_at = redis.call("ZSCORE", pending, identity)
  if not reap_at or tonumber(reap_at) > now then
    return CODE.NOT_DUE
  end
  local started = redis.call("HGET", record, "started_at")
  if started and tonumber(started) >= tonumber(judged_at) then
    return CODE.NOT_DUE
  end
  return nil
end

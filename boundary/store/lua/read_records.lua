-- read_records: the same fields of each of one run's records, in one command (read only).
-- It exists so that a run's records cost one command to send, not one HMGET of every field
-- name per record; the field names are kept here, so a call sends only the keys.
--
-- KEYS[1] = a record key of ONE run (tb:{run}:call:<id>), KEYS[2..N] = the run's other
--           record keys to read (they share its hash tag)
-- ARGV: none
--
-- Returns one array per record, in the order of KEYS: its fields' values in the order of
-- FIELDS (nil for a missing field, all nil for a missing record). Writes nothing.
--
-- FIELDS is boundary.store.codec.PROGRESS_FIELDS, name for name, in its order
-- (tests/unit/test_script_codes.py holds the two to the same list).
local FIELDS = {
  "run_id", "tool_call_id", "tool_name", "status", "evidence_status", "request",
  "agent_result", "scope", "error_code", "seq", "created_at", "updated_at", "deadline",
  "diagnostic", "request_sha256", "attempt", "started_at", "heartbeat_at", "progress",
  "progress_message", "projector_version", "handbacks", "format",
}
local out = {}
for i, key in ipairs(KEYS) do
  out[i] = redis.call("HMGET", key, unpack(FIELDS))
end
return out

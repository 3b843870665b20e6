-- read_records: the same fields of each of one run's records, in one command (read only).
-- It exists so that a run's records cost one command to send, not one HMGET of every field
-- name per record.
--
-- KEYS[1] = a record key of ONE run (tb:{run}:call:<id>), KEYS[2..N] = the run's other
--           record keys to read (they share its hash tag)
-- ARGV[1..F] = the field names to read
--
-- Returns one array per record, in the order of KEYS: its fields' values in the order of ARGV
-- (nil for a missing field, all nil for a missing record). Writes nothing.
local out = {}
for i, key in ipairs(KEYS) do
  out[i] = redis.call("HMGET", key, unpack(ARGV))
end
return out

-- Reads the fields ARGV of each record KEYS[i] (one run's records: their keys share its hash
-- tag): one HMGET each, answered as one array per record (a missing field or record: nil).
-- Read only. It exists so that a run's records cost one command to send, not one HMGET of
-- every field name per record.
local out = {}
for i, key in ipairs(KEYS) do
  out[i] = redis.call('HMGET', key, unpack(ARGV))
end
return out

-- side_write: keeps a re-projection's new projection of one call beside its record, by
-- projector version. The record itself is never written.
--
-- KEYS[1] = record key      tb:{run}:call:<id>
-- KEYS[2] = side key        tb:{run}:side:<id>:<version>
-- KEYS[3] = side versions   tb:{run}:side-versions (a set of versions, expiring with the
--                           last side projection written)
-- ARGV[1] = created_at (epoch ms) of the record the projection was made from
-- ARGV[2..] = field, value pairs of the side projection
--
-- The side projection expires with its record: its expiry is the record's own (PEXPIRETIME,
-- read in this script, set with PEXPIREAT: never past it).
--
-- Returns (CODE, _prelude.lua) OK written; MISSING the record is gone (or has no expiry: not
-- ours); REPLACED the record under these ids is another call (created at another time).

-- The record's absolute expiry (ms), copied as it is: a remaining TTL (PTTL) read and then
-- set (PEXPIRE) can land a millisecond after the record's (seen once in a suite run).
local expires_at = redis.call("PEXPIRETIME", KEYS[1])
if expires_at <= 0 then
  return CODE.MISSING
end
if redis.call("HGET", KEYS[1], "created_at") ~= ARGV[1] then
  return CODE.REPLACED
end
redis.call("DEL", KEYS[2])
redis.call("HSET", KEYS[2], unpack(ARGV, 2))
redis.call("PEXPIREAT", KEYS[2], expires_at)
for i = 2, #ARGV - 1, 2 do
  if ARGV[i] == "projector_version" then
    local kept_until = redis.call("PEXPIRETIME", KEYS[3])
    redis.call("SADD", KEYS[3], ARGV[i + 1])
    if kept_until < expires_at then
      redis.call("PEXPIREAT", KEYS[3], expires_at)
    end
  end
end
return CODE.OK

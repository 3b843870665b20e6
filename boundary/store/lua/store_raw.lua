-- store_raw: keep a tool's complete raw response in its record, once, while PROJECTING.
-- Never re-creates an expired key; a field write keeps the remaining TTL.
--
-- KEYS[1] = record key
-- ARGV[1] = raw (canonical JSON)
-- ARGV[2] = unused (the caller's clock once; the time is Redis TIME)
-- ARGV[3] = the attempt keeping it (its fencing token), or absent/"" for no fence
--
-- Returns the write time (epoch ms, the record's new updated_at; always > 1) when stored;
-- else (CODE, _prelude.lua) MISSING; NOT_PROJECTING; SUPERSEDED another attempt has the call
-- (this one is stale: nothing kept); ALREADY_STORED.

-- One read of the status and the attempt (not_projecting and fenced in _prelude.lua, from
-- it): fewer commands, the same decisions in the same order.
local read = redis.call("HMGET", KEYS[1], "status", "attempt")
if not read[1] then
  return CODE.MISSING
end
if read[1] ~= "PROJECTING" then
  return CODE.NOT_PROJECTING
end
if ARGV[3] and ARGV[3] ~= "" and tonumber(read[2] or "1") ~= tonumber(ARGV[3]) then
  redis.call("HINCRBY", KEYS[1], "stale_refusals", 1)
  return CODE.SUPERSEDED
end
if redis.call("HEXISTS", KEYS[1], "raw") == 1 then
  return CODE.ALREADY_STORED
end
local now = now_ms()
redis.call("HSET", KEYS[1], "raw", ARGV[1], "updated_at", now)
return now

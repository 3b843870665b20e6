-- store_raw: keep a tool's complete raw response in its record, once, while PROJECTING.
-- Never re-creates an expired key; a field write keeps the remaining TTL.
--
-- KEYS[1] = record key
-- ARGV[1] = raw (canonical JSON)
-- ARGV[2] = unused (the caller's clock once; the time is Redis TIME)
--
-- Returns the write time (epoch ms, the record's new updated_at; always > 1) when stored;
-- 0 missing or expired; -1 not PROJECTING; -2 raw already stored.

local status = redis.call("HGET", KEYS[1], "status")
if not status then
  return 0
end
if status ~= "PROJECTING" then
  return -1
end
if redis.call("HEXISTS", KEYS[1], "raw") == 1 then
  return -2
end
local time = redis.call("TIME")
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call("HSET", KEYS[1], "raw", ARGV[1], "updated_at", now)
return now

-- job_start: creates a re-projection job unless one has its id (then it is left as it is).
--
-- KEYS[1] = job hash        tb:{jobs}:job:<id>
-- KEYS[2] = jobs index      tb:{jobs}:index
-- ARGV[1] = job id
-- ARGV[2] = spec (JSON: the selection and options)
-- ARGV[3] = lanes (>= 1)
-- ARGV[4] = TTL of the job, ms
-- ARGV[5] = each lane's first cursor
--
-- Returns {1, spec} created; {0, spec} a job with this id exists (its spec).

if redis.call("EXISTS", KEYS[1]) == 1 then
  return {0, redis.call("HGET", KEYS[1], "spec") or ""}
end
local time = redis.call("TIME")
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ttl = tonumber(ARGV[4])
local lanes = tonumber(ARGV[3])
redis.call("HSET", KEYS[1], "id", ARGV[1], "spec", ARGV[2], "state", "running", "cancel", "0",
  "lanes", lanes, "lanes_ended", 0, "created_at", now, "updated_at", now, "chunks", 0)
for lane = 0, lanes - 1 do
  redis.call("HSET", KEYS[1], "lane:" .. lane, ARGV[5])
end
redis.call("PEXPIRE", KEYS[1], ttl)
redis.call("ZADD", KEYS[2], now, ARGV[1])
-- Jobs created more than a TTL ago are gone: their index entries go too.
redis.call("ZREMRANGEBYSCORE", KEYS[2], "-inf", now - ttl)
redis.call("PEXPIRE", KEYS[2], ttl)
return {1, ARGV[2]}

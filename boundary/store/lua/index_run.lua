-- index_run: on a Redis Cluster, the runs index's share of create.lua (which cannot touch the
-- index there: it is in another hash slot than the run's keys). The client calls it after
-- the call was created. Same rules as create.lua: the run scored by its newest record's
-- expiry on this node's clock (never moved back), the index never immortal, and a run's
-- first call trims up to ten members scored before now.
--
-- KEYS[1] = runs index   tb:runs
-- ARGV[1] = run_id
-- ARGV[2] = ttl, ms (> 0)
-- ARGV[3] = "1" when this is the run's first call (seq 1), else "0"
--
-- Returns OK (CODE, _prelude.lua).

local now = now_ms()
local ttl = tonumber(ARGV[2])
redis.call("ZADD", KEYS[1], "GT", now + ttl, ARGV[1])
if redis.call("PTTL", KEYS[1]) < ttl then
  redis.call("PEXPIRE", KEYS[1], ttl)
end
if ARGV[3] == "1" then
  local expired = redis.call("ZRANGE", KEYS[1], "-inf", now, "BYSCORE", "LIMIT", 0, 10)
  if #expired > 0 then
    redis.call("ZREM", KEYS[1], unpack(expired))
  end
end
return CODE.OK

-- status: one tool's flow control at a glance (the limits command, the metrics, the web
-- view). Read-only but for the rate window's trim.
-- (KEYS and ARGV[1..6]: _prelude.lua.)
--
-- Returns {limits, counts, running_by_tenant, waiting_by_tenant, override}:
--   limits = {concurrency, tenant_concurrency, rate_limit, rate_period_ms, max_waiting}, -1
--            for none (the declared ones overlaid by the override)
--   counts = {holding a slot, waiting (in line or admitted), starts in the rate window
--            (real ones), granted and not started yet, stale holders refused}
--   running_by_tenant, waiting_by_tenant = {tenant, n, ...}
--   override = the override hash as {field, value, ...}

local function shown(value)
  return value or -1
end
local starts, pending = 0, 0
if PERIOD then
  redis.call("ZREMRANGEBYSCORE", KEYS[4], "-inf", NOW - PERIOD)
  starts = redis.call("ZCOUNT", KEYS[4], NOW - PERIOD + 1, NOW)
  pending = redis.call("ZCOUNT", KEYS[4], "(" .. NOW, "+inf")
end
local waiting_by_tenant = {}
for _, tenant in ipairs(redis.call("LRANGE", KEYS[7], 0, 999)) do
  local n = tenant_count(tenant)
  if n > 0 then
    table.insert(waiting_by_tenant, tenant)
    table.insert(waiting_by_tenant, n)
  end
end
return {
  {shown(CONCURRENCY), shown(TENANT_CONCURRENCY), shown(RATE), shown(PERIOD), shown(MAX_WAITING)},
  {redis.call("ZCARD", KEYS[1]), redis.call("HLEN", KEYS[5]), starts, pending,
    tonumber(redis.call("HGET", KEYS[11], "stale_holders") or "0")},
  redis.call("HGETALL", KEYS[3]),
  waiting_by_tenant,
  redis.call("HGETALL", KEYS[10]),
}

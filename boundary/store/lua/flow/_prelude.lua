-- The shared part of every flow-control script (prepended to each when it is loaded).
-- Flow control keeps one tool's slots, rate and waiting line in keys of one hash slot (the
-- tool's tag), so every script of it is one atomic step on one Redis Cluster node.
--
-- KEYS[1]  = running      sorted set: identity -> when the reaper next checks the lease, ms
-- KEYS[2]  = leases       hash: identity -> "attempt\ttenant\tgranted_ms\tstarted(0|1)\tpriority"
-- KEYS[3]  = tenants      hash: tenant -> calls holding a slot
-- KEYS[4]  = starts       sorted set: "identity:attempt" -> start time, ms, or +inf while
--                         granted and not started (it holds its place in the rate window)
-- KEYS[5]  = waiting      hash: identity ->
--                         "state\ttenant\tpriority\tattempt\tdeadline\tsince\tmember"
--                         (state q: in line, member its queue member; u: admitted before its
--                         record exists, not yet in line, no member)
-- KEYS[6]  = queue        sorted set, all scores 0: "tenant|priority|seq|identity" members
--                         (lexical order: by tenant, higher priority first, then arrival)
-- KEYS[7]  = ready        list: tenants with calls in line, in round-robin order
-- KEYS[8]  = unconfirmed  sorted set: identity -> admitted at, ms (state u)
-- KEYS[9]  = deadlines    sorted set: identity -> its run's deadline, ms (waiting calls)
-- KEYS[10] = conf         hash: the run-time override (concurrency, tenant_concurrency,
--                         rate_limit, rate_period_ms, max_waiting; "none" lifts a limit)
-- KEYS[11] = meta         hash: seq (arrival counter), wake_at (ms of the scheduled wake-up)
-- KEYS[12] = unsent       set: identities granted a slot whose execute message failed to send
--
-- ARGV[1..5] = the tool's declared limits, "" for none: concurrency, tenant_concurrency,
--              rate limit, rate period (ms), max_waiting
-- ARGV[6]    = lease check interval, ms: a slot's holder is checked by the reaper this long
--              after it was granted (and every such interval after)
-- Every time is the store's (Redis TIME).

local function now_ms()
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local NOW = now_ms()
local CHECK_MS = tonumber(ARGV[6])

-- No key of flow control lives for ever: each is kept a week past the last write (Redis drops
-- an empty one at once), so a tool that is gone leaves nothing behind. The override (KEYS[10])
-- is an operator's setting: it stays until reset.
local LIFE_MS = 7 * 24 * 3600 * 1000

local function keep()
  for n = 1, 12 do
    if n ~= 10 then
      redis.call("PEXPIRE", KEYS[n], LIFE_MS)
    end
  end
end

local function split(text)
  local parts = {}
  for part in string.gmatch(text, "([^\t]*)\t?") do
    table.insert(parts, part)
  end
  return parts
end

-- A declared limit overlaid by the override: a number, or nil for none.
local function limit(field, declared)
  local override = redis.call("HGET", KEYS[10], field)
  if override == "none" then
    return nil
  end
  if override then
    return tonumber(override)
  end
  if declared == "" then
    return nil
  end
  return tonumber(declared)
end

local CONCURRENCY = limit("concurrency", ARGV[1])
local TENANT_CONCURRENCY = limit("tenant_concurrency", ARGV[2])
local RATE = limit("rate_limit", ARGV[3])
local PERIOD = limit("rate_period_ms", ARGV[4])
if not PERIOD then
  RATE = nil
end
local MAX_WAITING = limit("max_waiting", ARGV[5])

-- The lexical range of one tenant's members in the queue.
local function tenant_range(tenant)
  return "[" .. tenant .. "|", "[" .. tenant .. "|\255"
end

local function tenant_head(tenant)
  local low, high = tenant_range(tenant)
  local head = redis.call("ZRANGEBYLEX", KEYS[6], low, high, "LIMIT", 0, 1)
  return head[1]
end

local function tenant_count(tenant)
  local low, high = tenant_range(tenant)
  return redis.call("ZLEXCOUNT", KEYS[6], low, high)
end

-- Starts in the rate window (granted and not yet started included); the window's oldest
-- start, when the window is full, so a wake-up can be scheduled at oldest + period.
local function rate_state()
  if not RATE then
    return 0, nil
  end
  redis.call("ZREMRANGEBYSCORE", KEYS[4], "-inf", NOW - PERIOD)
  local used = redis.call("ZCARD", KEYS[4])
  if used < RATE then
    return used, nil
  end
  local oldest = redis.call("ZRANGEBYSCORE", KEYS[4], "-inf", "+inf", "WITHSCORES", "LIMIT", 0, 1)
  if oldest[2] and oldest[2] ~= "inf" then
    return used, tonumber(oldest[2]) + PERIOD
  end
  return used, nil
end

-- A slot is free for the tool (not counting tenants): concurrency and rate allow one more.
-- Also the time a wake-up should come when only the rate holds calls back.
local function slot_free()
  if CONCURRENCY and redis.call("ZCARD", KEYS[1]) >= CONCURRENCY then
    return false, nil
  end
  local used, wake = rate_state()
  if RATE and used >= RATE then
    return false, wake
  end
  return true, nil
end

local function tenant_free(tenant)
  if not TENANT_CONCURRENCY then
    return true
  end
  return tonumber(redis.call("HGET", KEYS[3], tenant) or "0") < TENANT_CONCURRENCY
end

-- Gives identity a slot for attempt; it holds it until released.
local function take_slot(identity, attempt, tenant, priority)
  redis.call("ZADD", KEYS[1], NOW + CHECK_MS, identity)
  redis.call("HSET", KEYS[2], identity,
    attempt .. "\t" .. tenant .. "\t" .. NOW .. "\t0\t" .. priority)
  redis.call("HINCRBY", KEYS[3], tenant, 1)
  if RATE then
    redis.call("ZADD", KEYS[4], "+inf", identity .. ":" .. attempt)
  end
end

-- Frees identity's slot, if it holds one; a start that never happened leaves the window.
local function free_slot(identity)
  local lease = redis.call("HGET", KEYS[2], identity)
  if not lease then
    return false
  end
  local parts = split(lease)
  redis.call("ZREM", KEYS[1], identity)
  redis.call("HDEL", KEYS[2], identity)
  if redis.call("HINCRBY", KEYS[3], parts[2], -1) <= 0 then
    redis.call("HDEL", KEYS[3], parts[2])
  end
  local member = identity .. ":" .. parts[1]
  if redis.call("ZSCORE", KEYS[4], member) == "inf" then
    redis.call("ZREM", KEYS[4], member)
  end
  return true
end

-- Takes identity out of line (or out of the admitted-not-yet-in-line set).
local function leave_line(identity)
  local ticket = redis.call("HGET", KEYS[5], identity)
  if not ticket then
    return false
  end
  local parts = split(ticket)
  redis.call("HDEL", KEYS[5], identity)
  redis.call("ZREM", KEYS[8], identity)
  redis.call("ZREM", KEYS[9], identity)
  if parts[1] == "q" then
    redis.call("ZREM", KEYS[6], parts[7])
    -- A tenant left with nothing in line drops out of the rotation when the pump reaches it.
  end
  return true
end

-- 2^31 - 1 - priority, ten digits: higher priorities sort first.
local function priority_key(priority)
  return string.format("%010d", 2147483647 - tonumber(priority))
end

-- Puts identity in line (state q) behind its tenant's calls of the same or higher priority.
local function join_line(identity, tenant, priority, attempt, deadline, since)
  local seq = redis.call("HINCRBY", KEYS[11], "seq", 1)
  local member = tenant .. "|" .. priority_key(priority) .. "|" .. string.format("%016x", seq)
    .. "|" .. identity
  redis.call("ZADD", KEYS[6], 0, member)
  redis.call("HSET", KEYS[5], identity, "q\t" .. tenant .. "\t" .. priority .. "\t" .. attempt
    .. "\t" .. deadline .. "\t" .. since .. "\t" .. member)
  redis.call("ZREM", KEYS[8], identity)
  if deadline ~= "" then
    redis.call("ZADD", KEYS[9], tonumber(deadline), identity)
  end
  if tenant_count(tenant) == 1 then
    -- First in line of its tenant: the tenant joins the rotation at its end (one turn of
    -- every tenant already waiting comes first).
    redis.call("LREM", KEYS[7], 0, tenant)
    redis.call("RPUSH", KEYS[7], tenant)
  end
end

-- Hands free slots to the calls in line, one per tenant per turn. Returns the grants
-- {identity, attempt, waited_ms, ...}, the calls whose deadline passed in line (taken out,
-- to be sealed by the caller) and the time a wake-up is due (0: none needed).
local function pump()
  local grants, expired = {}, {}
  local wake = 0
  while true do
    local free, rate_wake = slot_free()
    if not free then
      if rate_wake and redis.call("LLEN", KEYS[7]) > 0 then
        wake = rate_wake
      end
      break
    end
    local turns = redis.call("LLEN", KEYS[7])
    local granted = false
    while turns > 0 and not granted do
      turns = turns - 1
      local tenant = redis.call("LPOP", KEYS[7])
      local member = tenant_head(tenant)
      if member then
        if not tenant_free(tenant) then
          redis.call("RPUSH", KEYS[7], tenant)
        else
          local identity = string.match(member, "|([^|]*)$")
          local ticket = split(redis.call("HGET", KEYS[5], identity) or "")
          leave_line(identity)
          if ticket[1] == nil or ticket[1] == "" then
            -- A queue member without its ticket (not written by this code): dropped.
            redis.call("ZREM", KEYS[6], member)
            redis.call("LPUSH", KEYS[7], tenant)
            turns = turns + 1
          elseif ticket[5] ~= "" and tonumber(ticket[5]) <= NOW then
            -- Its run's deadline passed in line: it never runs; the tenant keeps its turn.
            table.insert(expired, identity)
            if tenant_head(tenant) then
              redis.call("LPUSH", KEYS[7], tenant)
              turns = turns + 1
            end
          else
            take_slot(identity, ticket[4], tenant, ticket[3])
            table.insert(grants, identity)
            table.insert(grants, tonumber(ticket[4]))
            table.insert(grants, NOW - tonumber(ticket[6]))
            if tenant_head(tenant) then
              redis.call("RPUSH", KEYS[7], tenant)
            end
            granted = true
          end
        end
      end
    end
    if not granted then
      break
    end
  end
  return grants, expired, wake
end

-- The wake-up to schedule: wake when it is earlier than the one scheduled (or that one is
-- past: it was lost or has run), else 0 (one is due already).
local function wake_to_schedule(wake)
  if wake == 0 then
    return 0
  end
  local scheduled = tonumber(redis.call("HGET", KEYS[11], "wake_at") or "0")
  if scheduled > NOW and scheduled <= wake then
    return 0
  end
  redis.call("HSET", KEYS[11], "wake_at", wake)
  return wake
end

-- A script's reply: {code, now (ms), a wake-up to schedule (ms, 0: none), the grants, the
-- calls whose deadline passed in line}.
local function pumped(code)
  local grants, expired, wake = pump()
  keep()
  return {code, NOW, wake_to_schedule(wake), grants, expired}
end

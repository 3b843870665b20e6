-- job_checkpoint: one lane of a job moves its cursor past a chunk, and in the same step adds
-- the chunk's totals and report lines: a chunk counts once, or not at all (a worker killed
-- before this script leaves the cursor where it was, and the chunk is done again).
--
-- KEYS[1] = job hash        tb:{jobs}:job:<id>
-- KEYS[2] = job lines       tb:{jobs}:lines:<id>
-- ARGV[1] = lane
-- ARGV[2] = the cursor the chunk started from (the lane's cursor the caller read)
-- ARGV[3] = the cursor after the chunk, or "" when the lane's selection is done
-- ARGV[4] = "1": the lane stops here (cancelled); "2": it stops failed (a bug or a store
--           failure the chunk could not get past); else "0"
-- ARGV[5] = TTL of the job, ms (refreshed)
-- ARGV[6] = most bytes the job keeps, as Redis's MEMORY USAGE counts its hash and its lines
--           stream (the oldest lines go first; the hash holds those bytes as they were after
--           its last lines, ``report_bytes``, and the lines dropped, ``lines_trimmed``)
-- ARGV[7] = n, the number of totals
-- ARGV[8 .. 7+2n] = total name, increment pairs
-- ARGV[8+2n ..] = report lines
--
-- Returns 1 checkpointed (the lane goes on); 2 checkpointed and the lane ended (done or
-- cancelled); 3 checkpointed, the lane ended and with it the job (once a job); 0 not the
-- lane's cursor (another task did this chunk); -1 no such job; -2 the lane had ended already.

if redis.call("EXISTS", KEYS[1]) == 0 then
  return -1
end
local lane = "lane:" .. ARGV[1]
if redis.call("HEXISTS", KEYS[1], lane .. ":ended") == 1 then
  return -2
end
if redis.call("HGET", KEYS[1], lane) ~= ARGV[2] then
  return 0
end
local time = redis.call("TIME")
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local n = tonumber(ARGV[7])
for i = 0, n - 1 do
  redis.call("HINCRBY", KEYS[1], "t:" .. ARGV[8 + 2 * i], ARGV[9 + 2 * i])
end
redis.call("HSET", KEYS[1], lane, ARGV[3], "updated_at", now)
redis.call("HINCRBY", KEYS[1], "chunks", 1)
if ARGV[4] == "2" then
  redis.call("HSET", KEYS[1], "failed", "1")
end
local cancel = redis.call("HGET", KEYS[1], "cancel") == "1"
local code = 1
if ARGV[3] == "" or ARGV[4] ~= "0" or cancel then
  code = 2
  redis.call("HSET", KEYS[1], lane .. ":ended", now)
  local ended = redis.call("HINCRBY", KEYS[1], "lanes_ended", 1)
  if ended >= tonumber(redis.call("HGET", KEYS[1], "lanes")) then
    local state = "done"
    if redis.call("HGET", KEYS[1], "failed") == "1" then
      state = "failed"
    elseif cancel then
      state = "cancelled"
    end
    redis.call("HSET", KEYS[1], "state", state, "finished_at", now)
    code = 3
  end
end

local first_line = 8 + 2 * n
if first_line <= #ARGV then
  for i = first_line, #ARGV do
    redis.call("XADD", KEYS[2], "*", "l", ARGV[i])
  end
  -- Every other field of the hash is written by now; these two are written before the
  -- count so that it counts them (their new values below are as long, give or take a few
  -- digits: the bound keeps 64 bytes for them).
  redis.call("HINCRBY", KEYS[1], "lines_trimmed", 0)
  redis.call("HINCRBY", KEYS[1], "report_bytes", 0)
  local bound = tonumber(ARGV[6]) - 64
  -- What the job keeps, as Redis counts it: its hash, and its lines stream with its
  -- overhead (entries' headers, the stream's nodes, the allocator's rounding). Each key is
  -- counted exactly (SAMPLES 0: every node or field) and as a plain MEMORY USAGE estimates
  -- it (from its first few); the larger counts, so that whoever asks Redis sees no more than
  -- the bound.
  local function usage(key)
    if redis.call("EXISTS", key) == 0 then
      return 0
    end
    return math.max(
      redis.call("MEMORY", "USAGE", key, "SAMPLES", "0"),
      redis.call("MEMORY", "USAGE", key)
    )
  end
  local function kept_bytes()
    return usage(KEYS[1]) + usage(KEYS[2])
  end
  local kept = kept_bytes()
  local dropped = 0
  -- Oldest lines first. A stream frees a node only once all its entries are gone, so each
  -- round drops at least a node's worth of lines (4 KiB, stream-node-max-bytes' default)
  -- before it counts again.
  while kept > bound do
    local oldest = redis.call("XRANGE", KEYS[2], "-", "+", "COUNT", 100)
    if #oldest == 0 then
      break
    end
    local goal = math.max(kept - bound, 4096)
    local freed = 0
    for _, entry in ipairs(oldest) do
      if freed >= goal then
        break
      end
      redis.call("XDEL", KEYS[2], entry[1])
      freed = freed + #entry[2][2] + 16
      dropped = dropped + 1
    end
    kept = kept_bytes()
  end
  redis.call("HSET", KEYS[1], "report_bytes", kept)
  if dropped > 0 then
    redis.call("HINCRBY", KEYS[1], "lines_trimmed", dropped)
  end
  if redis.call("EXISTS", KEYS[2]) == 1 then
    redis.call("PEXPIRE", KEYS[2], ARGV[5])
  end
end
redis.call("PEXPIRE", KEYS[1], ARGV[5])
return code

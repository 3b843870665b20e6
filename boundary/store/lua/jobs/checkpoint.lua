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
-- ARGV[6] = most bytes of report lines kept (the oldest lines go first; the hash counts the
--           bytes kept, ``report_bytes``, and the lines dropped, ``lines_trimmed``)
-- ARGV[7] = n, the number of totals
-- ARGV[8 .. 7+2n] = total name, increment pairs
-- ARGV[8+2n ..] = report lines
--
-- Returns 1 checkpointed (the lane goes on); 2 checkpointed and the lane ended (done or
-- cancelled); 0 not the lane's cursor (another task did this chunk); -1 no such job;
-- -2 the lane had ended already.

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
local first_line = 8 + 2 * n
local max_bytes = tonumber(ARGV[6])
local added = 0
for i = first_line, #ARGV do
  redis.call("XADD", KEYS[2], "*", "l", ARGV[i])
  added = added + #ARGV[i]
end
if added > 0 then
  local kept = redis.call("HINCRBY", KEYS[1], "report_bytes", added)
  local dropped = 0
  -- Oldest first, a page at a time: whole stream nodes empty and are freed.
  while kept > max_bytes do
    local oldest = redis.call("XRANGE", KEYS[2], "-", "+", "COUNT", 100)
    if #oldest == 0 then
      break
    end
    for _, entry in ipairs(oldest) do
      if kept <= max_bytes then
        break
      end
      redis.call("XDEL", KEYS[2], entry[1])
      kept = kept - #entry[2][2]
      dropped = dropped + 1
    end
  end
  if dropped > 0 then
    redis.call("HSET", KEYS[1], "report_bytes", kept)
    redis.call("HINCRBY", KEYS[1], "lines_trimmed", dropped)
  end
  if redis.call("EXISTS", KEYS[2]) == 1 then
    redis.call("PEXPIRE", KEYS[2], ARGV[5])
  end
end
redis.call("HSET", KEYS[1], lane, ARGV[3], "updated_at", now)
redis.call("HINCRBY", KEYS[1], "chunks", 1)
redis.call("PEXPIRE", KEYS[1], ARGV[5])
if ARGV[4] == "2" then
  redis.call("HSET", KEYS[1], "failed", "1")
end
local cancel = redis.call("HGET", KEYS[1], "cancel") == "1"
if ARGV[3] ~= "" and ARGV[4] == "0" and not cancel then
  return 1
end
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
end
return 2

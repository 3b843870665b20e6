-- unindex_run: drop a run from the pending-runs index, unless a create touched it since the
-- reaper read its score (each create increments the member's score after writing the call).
--
-- KEYS[1] = pending-runs index   tb:pending-runs
-- ARGV[1] = run_id
-- ARGV[2] = the score the reaper read
--
-- Returns 1 removed; 0 kept (touched since, or gone).

if redis.call("ZSCORE", KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call("ZREM", KEYS[1], ARGV[1])
end
return 0

-- unindex_run: drop runs from the pending-runs index that have no call PROJECTING.
-- One call takes every run a reaper pass found without pending calls in one chunk of the
-- index, so a pass that tidies up many runs costs one round trip per chunk, not one per run.
--
-- KEYS[1] = pending-runs index   tb:pending-runs
-- KEYS[1 + n] = the n-th run's pending key (single-node Redis only; absent on a cluster, where
--           it is in another hash slot)
-- ARGV[2n-1] = the n-th run_id
-- ARGV[2n]   = the score the reaper read for it
--
-- With the pending key, a run is dropped only if its pending set is gone, checked here
-- (a create writes its pending entry before it indexes the run, in one script). Without it,
-- only if no create touched the run since the reaper read its score (each create increments
-- the score after writing the call; on a cluster no seal drops a run, so scores never restart).
--
-- Returns the number of runs removed.

local removed = 0
for n = 1, #ARGV - 1, 2 do
  local pending = KEYS[(n + 1) / 2 + 1]
  local idle
  if pending then
    idle = redis.call("EXISTS", pending) == 0
  else
    idle = redis.call("ZSCORE", KEYS[1], ARGV[n]) == ARGV[n + 1]
  end
  if idle then
    removed = removed + redis.call("ZREM", KEYS[1], ARGV[n])
  end
end
return removed

-- unindex_run: drop runs from the pending-runs index, each unless a create touched it since the
-- reaper read its score (each create increments the member's score after writing the call).
-- One call takes every run a reaper pass found without pending calls in one chunk of the
-- index, so a pass that tidies up many runs costs one round trip per chunk, not one per run.
--
-- KEYS[1] = pending-runs index   tb:pending-runs
-- ARGV[2n-1] = run_id
-- ARGV[2n]   = the score the reaper read for it
--
-- Returns the number of runs removed (a run touched since, or gone, is kept / not counted).

local removed = 0
for n = 1, #ARGV - 1, 2 do
  if redis.call("ZSCORE", KEYS[1], ARGV[n]) == ARGV[n + 1] then
    removed = removed + redis.call("ZREM", KEYS[1], ARGV[n])
  end
end
return removed

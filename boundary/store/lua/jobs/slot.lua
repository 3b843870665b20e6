-- job_slot: the next fencing token of one lane's hold on a re-projection slot (the attempt
-- its chunk asks flow control's reserved entry with). It only counts up, so a chunk whose
-- lease was reclaimed (its worker stalled or died) can never release, nor renew, the slot of
-- a newer chunk of its lane.
--
-- KEYS[1] = job hash        tb:{jobs}:job:<id>
-- ARGV[1] = lane
--
-- Returns the new token (1, 2, ...), or 0: no such job (a write never re-creates an expired
-- job hash).

if redis.call("EXISTS", KEYS[1]) == 0 then
  return 0
end
return redis.call("HINCRBY", KEYS[1], "lane:" .. ARGV[1] .. ":slot", 1)

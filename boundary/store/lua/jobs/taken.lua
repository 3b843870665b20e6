-- job_taken: a worker has started a chunk of the job (set once; ``job_cancel`` then leaves
-- the job to its checkpoints). A write never re-creates a deleted or expired job hash.
--
-- KEYS[1] = job hash
--
-- Returns 1 marked (or marked before), 0 no such job.

if redis.call("EXISTS", KEYS[1]) == 0 then
  return 0
end
redis.call("HSET", KEYS[1], "taken", "1")
return 1

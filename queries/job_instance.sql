-- name: JobInstanceInsert :one
INSERT INTO job_instance (job, params, params_hash, confirm_purge)
VALUES (@job, @params, @params_hash, @confirm_purge)
RETURNING *;

-- name: JobInstanceGetByID :one
SELECT * FROM job_instance WHERE id = @id;

-- name: JobInstanceExecutionTotals :one
-- JobInstanceExecutionTotals adds up the executions of an instance: how
-- many there were and the provider calls they made.
SELECT count(*)::integer AS executions,
       coalesce(sum(external_calls), 0)::bigint AS external_calls
FROM job_execution WHERE instance_id = @instance_id;

-- name: JobInstanceTakeLease :one
-- JobInstanceTakeLease gives a starting execution the instance's next lease
-- epoch; from then on, writes of any earlier execution of the instance find
-- the epoch moved and write nothing.
UPDATE job_instance SET lease_epoch = lease_epoch + 1 WHERE id = @id RETURNING lease_epoch;

-- name: JobInstanceChunksLeft :one
-- JobInstanceChunksLeft returns an instance's plan and what is left of it:
-- the most chunks any of its executions planned (0 when none has planned
-- yet), the chunks committed and the external calls its executions made.
-- A resume's call estimate is the part of the whole run's for the chunks
-- left, and never more than the whole less the calls made. Two lookups by
-- the instance (job_execution_instance_id_idx, job_checkpoint's primary
-- key).
SELECT coalesce(max(e.chunks_total), 0)::bigint AS planned,
       (SELECT count(*) FROM job_checkpoint c WHERE c.instance_id = @instance_id)::bigint AS committed,
       coalesce(sum(e.external_calls), 0)::bigint AS calls
FROM job_execution e WHERE e.instance_id = @instance_id;

-- name: JobInstanceItemsCommitted :one
-- JobInstanceItemsCommitted counts the items an instance's executions have
-- committed, in chunks and in parts of chunks (a part's items move into
-- its chunk's checkpoint when the chunk commits, so none is counted twice):
-- what a resuming run has no longer to do, for the forecast of its end.
SELECT (coalesce((SELECT sum(c.targets) FROM job_checkpoint c WHERE c.instance_id = @instance_id), 0)
      + coalesce((SELECT sum(cardinality(p.items)) FROM job_checkpoint_part p WHERE p.instance_id = @instance_id), 0))::bigint AS items;

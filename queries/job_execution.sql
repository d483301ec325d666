-- name: JobExecutionInsert :one
INSERT INTO job_execution (instance_id, job, request_id, status, worker_id)
VALUES (@instance_id, @job, @request_id, 'STARTING', @worker_id)
RETURNING *;

-- name: JobExecutionGetByID :one
SELECT * FROM job_execution WHERE id = @id;

-- name: JobExecutionLastByJob :one
-- JobExecutionLastByJob returns the newest execution of the job's newest
-- instance, with that instance's identity: the row the restart rules read.
SELECT sqlc.embed(e), i.params_hash, i.confirm_purge AS instance_confirm_purge
FROM job_execution e
JOIN job_instance i ON i.id = e.instance_id
WHERE i.id = (SELECT max(ji.id) FROM job_instance ji WHERE ji.job = @job::text)
ORDER BY e.id DESC
LIMIT 1;

-- name: JobExecutionRunningByJob :one
SELECT * FROM job_execution
WHERE job = @job AND status IN ('STARTING', 'STARTED', 'STOPPING')
ORDER BY id DESC
LIMIT 1;

-- name: JobExecutionStart :exec
UPDATE job_execution
SET status = 'STARTED', started_at = now(), last_updated = now(),
    chunks_total = @chunks_total, chunks_done = @chunks_done, targets = @targets
WHERE id = @id AND status = 'STARTING';

-- name: JobExecutionChunkCommitted :one
-- JobExecutionChunkCommitted moves the execution's counts at a chunk commit
-- and returns its status, which is how a running job learns it was asked to
-- stop (STOPPING) at a chunk boundary.
UPDATE job_execution
SET last_updated = now(),
    chunks_done = chunks_done + 1,
    items_written = items_written + @written,
    items_skipped = items_skipped + @skipped,
    items_failed = items_failed + @failed,
    external_calls = external_calls + @external_calls
WHERE id = @id
RETURNING status;

-- name: JobExecutionAddCalls :exec
UPDATE job_execution SET external_calls = external_calls + @external_calls, last_updated = now() WHERE id = @id;

-- name: JobExecutionStatus :one
SELECT status FROM job_execution WHERE id = @id;

-- name: JobExecutionRequestStop :one
-- JobExecutionRequestStop marks the job's running execution STOPPING without
-- an end time: it still counts as running until its goroutine has ended.
UPDATE job_execution
SET status = 'STOPPING', last_updated = now()
WHERE id = (
    SELECT je.id FROM job_execution je
    WHERE je.job = @job::text AND je.status IN ('STARTING', 'STARTED')
    ORDER BY id DESC LIMIT 1
)
RETURNING *;

-- name: JobExecutionFinish :execrows
UPDATE job_execution
SET status = @status, exit_message = @exit_message, ended_at = now(), last_updated = now(),
    domain_rows = sqlc.narg('domain_rows')
WHERE id = @id AND status IN ('STARTING', 'STARTED', 'STOPPING');

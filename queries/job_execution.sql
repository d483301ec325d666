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

-- name: JobExecutionStart :one
-- JobExecutionStart records the plan and moves STARTING to STARTED; it
-- returns the status, which is STOPPING when a stop came in meanwhile.
UPDATE job_execution
SET status = CASE WHEN status = 'STARTING' THEN 'STARTED' ELSE status END,
    started_at = now(), last_updated = now(),
    chunks_total = @chunks_total, chunks_done = @chunks_done, targets = @targets
WHERE id = @id
RETURNING status;

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
    domain_rows = sqlc.narg('domain_rows'),
    targets = CASE WHEN targets < 0 THEN (SELECT coalesce(sum(c.targets), 0) FROM job_checkpoint c WHERE c.instance_id = job_execution.instance_id) ELSE targets END
WHERE id = @id AND status IN ('STARTING', 'STARTED', 'STOPPING');

-- name: JobExecutionIDsByInstance :many
SELECT id FROM job_execution WHERE instance_id = @instance_id ORDER BY id;

-- name: JobExecutionAbandon :execrows
-- JobExecutionAbandon ends an execution whose worker is gone.
UPDATE job_execution
SET status = 'ABANDONED', exit_message = @exit_message, ended_at = now(), last_updated = now()
WHERE id = @id AND status IN ('STARTING', 'STARTED', 'STOPPING');

-- name: JobListSummary :many
-- JobListSummary answers GET /v1/jobs in one statement, with the job
-- repository's definitions: last = the newest execution of the newest
-- instance; running = an execution in STARTING, STARTED or STOPPING;
-- heartbeat = that running execution's last_updated; keys = the key names
-- reported by live workers. Each part is a lookup of one row per job down
-- an index (job_instance_job_id_idx, job_execution_instance_id_idx, the
-- partial job_execution_active_idx, job_request_active_job_idx), so the
-- answer costs the same with a million executions in history as with ten.
WITH picked AS (
    SELECT n.job,
           (SELECT e.id FROM job_execution e
            WHERE e.instance_id = (SELECT ji.id FROM job_instance ji WHERE ji.job = n.job ORDER BY ji.id DESC LIMIT 1)
            ORDER BY e.id DESC LIMIT 1) AS last_id,
           (SELECT e.id FROM job_execution e
            WHERE e.job = n.job AND e.status IN ('STARTING', 'STARTED', 'STOPPING')
            ORDER BY e.id DESC LIMIT 1) AS running_id,
           (SELECT r.id FROM job_request r
            WHERE r.job = n.job AND r.status IN ('QUEUED', 'RUNNING')
            LIMIT 1) AS active_id
    FROM unnest(@jobs::text[]) AS n(job)
), live_keys AS (
    SELECT coalesce(array_agg(DISTINCT k.key), '{}')::text[] AS keys
    FROM worker w, unnest(w.configured_keys) AS k(key)
    WHERE w.heartbeat_at >= now() - make_interval(secs => @stale_seconds::float8) AND w.status <> 'stopped'
)
SELECT p.job::text AS job,
       le.id AS last_execution_id,
       le.status AS last_status,
       le.started_at AS last_started_at,
       le.ended_at AS last_ended_at,
       le.exit_message AS last_exit_message,
       (ru.id IS NOT NULL)::boolean AS running,
       coalesce(extract(epoch FROM now() - ru.last_updated), 0)::float8 AS heartbeat_age_seconds,
       a.id AS active_request_id,
       lk.keys AS live_keys
FROM picked p
LEFT JOIN job_execution le ON le.id = p.last_id
LEFT JOIN job_execution ru ON ru.id = p.running_id
LEFT JOIN job_request a ON a.id = p.active_id
CROSS JOIN live_keys lk;

-- name: JobExecutionListByIDs :many
SELECT * FROM job_execution WHERE id = ANY(@ids::bigint[]);

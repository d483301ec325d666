-- name: JobExecutionInsert :one
-- JobExecutionInsert creates an execution owned by worker_id under
-- lease_epoch, the epoch JobInstanceTakeLease just gave it.
INSERT INTO job_execution (instance_id, job, request_id, status, worker_id, lease_epoch)
VALUES (@instance_id, @job, @request_id, 'STARTING', @worker_id, @lease_epoch)
RETURNING *;

-- name: JobExecutionGetByID :one
SELECT * FROM job_execution WHERE id = @id;

-- name: JobExecutionLastByJob :one
-- JobExecutionLastByJob returns the newest execution of the job's newest
-- instance, with that instance's identity: the row the restart rules read.
-- The newest instance is found as JobListSummary finds it: the job is a
-- range, not an equality, and the order is the index's (job, id DESC), so
-- the only plan is one probe of job_instance_job_id_idx (an equality lets
-- the planner walk the primary key backward instead, past every other
-- job's instances; a prepared statement's generic plan did).
SELECT sqlc.embed(e), i.params_hash, i.confirm_purge AS instance_confirm_purge
FROM job_execution e
JOIN job_instance i ON i.id = e.instance_id
WHERE i.id = (SELECT ji.id FROM job_instance ji
              WHERE ji.job >= @job::text AND ji.job <= @job::text
              ORDER BY ji.job, ji.id DESC LIMIT 1)
ORDER BY e.id DESC
LIMIT 1;

-- name: JobExecutionRunningByJob :one
-- JobExecutionRunningByJob returns the job's newest active execution, down
-- the partial job_execution_active_idx (the job as a range, ordered as the
-- index: see JobListSummary).
SELECT * FROM job_execution
WHERE job >= @job::text AND job <= @job::text AND status IN ('STARTING', 'STARTED', 'STOPPING')
ORDER BY job, id DESC
LIMIT 1;

-- name: JobExecutionStart :one
-- JobExecutionStart records the plan and moves STARTING to STARTED; it
-- returns the status, which is STOPPING when a stop came in meanwhile. Like
-- every write of a run it is fenced: no row when the execution is no longer
-- active under this worker and lease epoch. chunks_done is the plan's
-- chunks already committed by earlier executions of the instance, which
-- chunks_before keeps: the execution's own commits are the chunks_done
-- added after it (migration 00019).
UPDATE job_execution
SET status = CASE WHEN status = 'STARTING' THEN 'STARTED' ELSE status END,
    started_at = now(), last_updated = now(),
    chunks_total = @chunks_total, chunks_done = @chunks_done, chunks_before = @chunks_done, targets = @targets
WHERE job_execution.id = @id
  AND execution_owned(job_execution, @worker_id::text, @lease_epoch::bigint)
RETURNING status;

-- name: JobExecutionChunkCommit :one
-- JobExecutionChunkCommit is a chunk commit's bookkeeping in one statement:
-- it moves the execution's counts, inserts the chunk's checkpoint and
-- returns the execution's status, which is how a running job learns it was
-- asked to stop (STOPPING) at a chunk boundary. It is fenced: while the
-- execution is not active under this worker and lease epoch it finds no row
-- and inserts no checkpoint. It is the first statement of the chunk's
-- transaction (sent in one round trip with its BEGIN), and it locks the
-- execution row, so a reaper abandoning the execution waits for the chunk's
-- commit or sees it rolled back. The chunk's checkpoint parts (its items
-- committed before it, by this execution or an earlier one of the instance)
-- fold into the checkpoint in the same statement: they are deleted and
-- their items added to its targets and written. Once the chunk has
-- committed, a resume skips it whole and nothing reads its parts, so
-- job_checkpoint_part holds only the parts of chunks not yet committed.
-- The counts are unchanged: each folded item was a target written. A chunk
-- is checkpointed once: an attempt retried while the first is still
-- committing waits for it on the execution's row, then finds the
-- checkpoint taken and moves nothing.
WITH owned AS (
    SELECT job_execution.id, job_execution.instance_id, job_execution.status
    FROM job_execution
    WHERE job_execution.id = @id
      AND execution_owned(job_execution, @worker_id::text, @lease_epoch::bigint)
    FOR UPDATE
), folded AS (
    DELETE FROM job_checkpoint_part p
    USING owned
    WHERE p.instance_id = owned.instance_id AND p.chunk = @chunk::text
    RETURNING cardinality(p.items) AS items
), folded_items AS (
    SELECT coalesce(sum(f.items), 0)::bigint AS n FROM folded f
), checkpoint AS (
    INSERT INTO job_checkpoint (instance_id, chunk, execution_id, targets, written, skipped, failed, skip_reason, external_calls)
    SELECT owned.instance_id, @chunk::text, owned.id, folded_items.n + @targets::bigint, folded_items.n + @written::bigint,
           @skipped::bigint, @failed::bigint, @skip_reason::text, @chunk_calls::int
    FROM owned, folded_items
    ON CONFLICT (instance_id, chunk) DO NOTHING
    RETURNING 1 AS inserted
), execution AS (
    UPDATE job_execution
    SET last_updated = now(),
        chunks_done = chunks_done + 1,
        items_written = items_written + @written::bigint,
        items_skipped = items_skipped + @skipped::bigint,
        items_failed = items_failed + @failed::bigint,
        external_calls = external_calls + @external_calls::int
    FROM owned
    WHERE job_execution.id = owned.id AND EXISTS (SELECT 1 FROM checkpoint)
)
SELECT radar_owned((SELECT owned.status FROM owned))::text AS status;

-- name: JobExecutionAddCalls :execrows
-- JobExecutionAddCalls records calls made outside a chunk commit (a failed
-- chunk's); fenced, 0 rows when the run lost its ownership.
UPDATE job_execution SET external_calls = external_calls + @external_calls, last_updated = now()
WHERE job_execution.id = @id
  AND execution_owned(job_execution, @worker_id::text, @lease_epoch::bigint);

-- name: JobExecutionOwned :one
-- JobExecutionOwned returns the execution's status while it is active under
-- this worker and lease epoch, and no row once the run has lost it: the
-- runner's lease check between commits.
SELECT status FROM job_execution
WHERE job_execution.id = @id
  AND execution_owned(job_execution, @worker_id::text, @lease_epoch::bigint);

-- name: JobExecutionFence :one
-- JobExecutionFence is the first statement of a fenced write a job makes
-- outside its chunks' commits (the plan it freezes in the database, the
-- record of a download): it returns the execution's status while the
-- execution is the run's (execution_owned) and raises SQLSTATE BR001
-- (radar_owned) once the run has lost it, so the transaction writes
-- nothing. It locks the execution row until the commit, so a reaper
-- abandoning the execution waits for the write or sees it rolled back.
SELECT radar_owned((
    SELECT job_execution.status FROM job_execution
    WHERE job_execution.id = @id
      AND execution_owned(job_execution, @worker_id::text, @lease_epoch::bigint)
    FOR SHARE
))::text AS status;

-- name: JobExecutionRequestStop :one
-- JobExecutionRequestStop marks the job's running execution STOPPING without
-- an end time: it still counts as running until its goroutine has ended.
-- The status is checked on the updated row itself, not only in the subquery
-- that picks it: when the run's outcome commits while this statement waits
-- for the row, READ COMMITTED re-checks only the outer WHERE against the
-- committed row, and a stop must then find nothing (the run already ended)
-- rather than turn a finished execution back into STOPPING.
UPDATE job_execution
SET status = 'STOPPING', last_updated = now()
WHERE id = (
    SELECT je.id FROM job_execution je
    WHERE je.job >= @job::text AND je.job <= @job::text AND je.status IN ('STARTING', 'STARTED')
    ORDER BY je.job, je.id DESC LIMIT 1
)
  AND status IN ('STARTING', 'STARTED')
RETURNING *;

-- name: JobExecutionFinish :execrows
-- JobExecutionFinish records a run's outcome; fenced, 0 rows when the run
-- lost its ownership (its outcome is then not the execution's).
UPDATE job_execution
SET status = @status, exit_message = @exit_message, ended_at = now(), last_updated = now(),
    domain_rows = sqlc.narg('domain_rows'),
    targets = CASE WHEN targets < 0 THEN (SELECT coalesce(sum(c.targets), 0) FROM job_checkpoint c WHERE c.instance_id = job_execution.instance_id)
        + (SELECT coalesce(sum(cardinality(p.items)), 0) FROM job_checkpoint_part p WHERE p.instance_id = job_execution.instance_id) ELSE targets END
WHERE job_execution.id = @id
  AND execution_owned(job_execution, @worker_id::text, @lease_epoch::bigint);

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
-- reported by live workers; last due = the newest due time its schedule
-- recorded, with its outcome; the deadline's figures = the active
-- request's creation, the running execution's forecast and the end of the
-- newest COMPLETED execution (job_execution_completed_idx). Each part is a lookup of one row per job down
-- an index (job_instance_job_id_idx, job_execution_instance_id_idx, the
-- partial job_execution_active_idx, job_request_active_job_idx, the
-- unique schedule_tick (job, due_at)), so the answer costs the same with a
-- million executions in history as with ten, however they are spread over
-- the jobs.
--
-- The newest-per-job lookups name the job as a range (job >= x AND job <=
-- x, the same rows as job = x) and order by the index's columns (job, id
-- DESC). With job = x the planner drops job from the order (it is
-- constant) and may walk the primary key backward, filtering on the job,
-- betting on the average job's share of the rows: with one busy job in
-- history, every quiet job's lookup walked past the busy job's rows (GET
-- /v1/jobs took 66 ms instead of 9 with 100,000 of one job's instances).
-- No other index gives the range's rows in (job, id DESC) order, so the
-- probe of the (job, id DESC) index is the only plan.
WITH picked AS (
    SELECT n.job,
           (SELECT e.id FROM job_execution e
            WHERE e.instance_id = (SELECT ji.id FROM job_instance ji
                                   WHERE ji.job >= n.job AND ji.job <= n.job
                                   ORDER BY ji.job, ji.id DESC LIMIT 1)
            ORDER BY e.id DESC LIMIT 1) AS last_id,
           (SELECT e.id FROM job_execution e
            WHERE e.job >= n.job AND e.job <= n.job AND e.status IN ('STARTING', 'STARTED', 'STOPPING')
            ORDER BY e.job, e.id DESC LIMIT 1) AS running_id,
           (SELECT r.id FROM job_request r
            WHERE r.job = n.job AND r.status IN ('QUEUED', 'RUNNING')
            LIMIT 1) AS active_id,
           (SELECT max(t.due_at) FROM schedule_tick t WHERE t.job = n.job) AS last_due_at,
           (SELECT e.id FROM job_execution e
            WHERE e.job >= n.job AND e.job <= n.job AND e.status = 'COMPLETED' AND e.ended_at IS NOT NULL
            ORDER BY e.job, e.ended_at DESC LIMIT 1) AS completed_id
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
       lk.keys AS live_keys,
       ld.due_at AS last_due_at,
       ld.outcome AS last_due_outcome,
       ld.request_id AS last_due_request_id,
       a.created_at AS active_request_created_at,
       ru.forecast_done_at AS forecast_done_at,
       lc.ended_at AS last_completed_at
FROM picked p
LEFT JOIN job_execution le ON le.id = p.last_id
LEFT JOIN job_execution ru ON ru.id = p.running_id
LEFT JOIN job_request a ON a.id = p.active_id
LEFT JOIN schedule_tick ld ON ld.job = p.job AND ld.due_at = p.last_due_at
LEFT JOIN job_execution lc ON lc.id = p.completed_id
CROSS JOIN live_keys lk;

-- name: JobExecutionListByIDs :many
SELECT * FROM job_execution WHERE id = ANY(@ids::bigint[]);

-- name: JobExecutionSetStopCause :one
-- JobExecutionSetStopCause records why an execution that did not complete
-- ended; the resume policy reads it. With resume_in_seconds it also records
-- resume_at, that long from now (a provider's Retry-After); without, it
-- keeps the resume_at recorded earlier. It returns how long from now
-- resume_at still is: 0 once passed, or when none was ever recorded.
UPDATE job_execution
SET stop_cause = @stop_cause,
    resume_at = coalesce(now() + make_interval(secs => sqlc.narg('resume_in_seconds')::float8), resume_at)
WHERE id = @id
RETURNING coalesce(greatest(extract(epoch FROM resume_at - now()), 0), 0)::float8 AS resume_in_seconds;

-- name: JobExecutionLockSkipLocked :many
-- JobExecutionLockSkipLocked locks an execution's row for its reap, or
-- returns no row when another transaction holds it (a dead worker's, still
-- open on the server): the reaper never waits on it, it skips the request
-- for this pass.
SELECT id FROM job_execution WHERE id = @id FOR UPDATE SKIP LOCKED;

-- name: JobExecutionForecastSet :execrows
-- JobExecutionForecastSet records the run's forecast of its end (NULL: no
-- pace yet). Fenced like every write of a run; it leaves last_updated, the
-- run's heartbeat, alone.
UPDATE job_execution SET forecast_done_at = sqlc.narg('forecast_done_at')
WHERE job_execution.id = @id
  AND execution_owned(job_execution, @worker_id::text, @lease_epoch::bigint);

-- name: JobDeadlineFigures :many
-- JobDeadlineFigures returns, per job of jobs, what its deadline is judged
-- by: the active request's creation, the running execution's forecast, and
-- the end of its newest COMPLETED execution. Every scrape of every process
-- reads it, so each figure is a probe of an index, as in JobListSummary.
WITH picked AS (
    SELECT n.job,
           (SELECT r.id FROM job_request r
            WHERE r.job = n.job AND r.status IN ('QUEUED', 'RUNNING')
            LIMIT 1) AS active_id,
           (SELECT e.id FROM job_execution e
            WHERE e.job >= n.job AND e.job <= n.job AND e.status IN ('STARTING', 'STARTED', 'STOPPING')
            ORDER BY e.job, e.id DESC LIMIT 1) AS running_id,
           (SELECT e.id FROM job_execution e
            WHERE e.job >= n.job AND e.job <= n.job AND e.status = 'COMPLETED' AND e.ended_at IS NOT NULL
            ORDER BY e.job, e.ended_at DESC LIMIT 1) AS completed_id
    FROM unnest(@jobs::text[]) AS n(job)
)
SELECT p.job::text AS job,
       a.created_at AS active_request_created_at,
       ru.forecast_done_at AS forecast_done_at,
       lc.ended_at AS last_completed_at
FROM picked p
LEFT JOIN job_request a ON a.id = p.active_id
LEFT JOIN job_execution ru ON ru.id = p.running_id
LEFT JOIN job_execution lc ON lc.id = p.completed_id;

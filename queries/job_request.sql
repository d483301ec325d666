-- name: JobRequestInsert :one
-- JobRequestInsert writes a request under the id JobRequestEnqueueState
-- drew, already linked to its River job (inserted first, carrying that id),
-- so the enqueue writes the row once.
-- A delay (not_before_seconds, an automatic resume's backoff) is counted
-- from the database's clock.
INSERT INTO job_request (id, job, params, params_hash, max_calls, confirm_purge, source, requested_by, estimated_calls, resumes_execution_id, worker_id, due_at, river_job_id, not_before)
VALUES (@id, @job, @params, @params_hash, sqlc.narg('max_calls'), @confirm_purge, @source, @requested_by, @estimated_calls, sqlc.narg('resumes_execution_id'), sqlc.narg('worker_id'), sqlc.narg('due_at'), sqlc.narg('river_job_id'),
        now() + make_interval(secs => sqlc.narg('not_before_seconds')::float8))
RETURNING *;

-- name: JobRequestWait :one
-- JobRequestWait returns how many seconds remain, by the database's clock,
-- before the request may start (0 when it may start now).
SELECT coalesce(greatest(extract(epoch FROM not_before - now()), 0), 0)::float8 AS wait_seconds
FROM job_request WHERE id = @id;

-- name: JobRequestEnqueueState :one
-- JobRequestEnqueueState reads what an enqueue decides on, under the job's
-- advisory lock: the job's active request (0: none), the newest execution
-- of its newest instance with that instance's identity (the restart rules'
-- input, as JobExecutionLastByJob; execution id 0: none), and, only when
-- the job has no active request, a new request id (0 otherwise: a
-- duplicate draws none). EnqueueStateTx sends it in one round trip with the lock. The query
-- lives in the function job_request_enqueue_state (migrations 00001 and
-- 00013) so that its plan is kept for the session even where pgx cannot
-- keep a prepared statement (behind PgBouncer's transaction pooling, which
-- plans every other statement at each call).
SELECT active_request_id::bigint AS active_request_id,
       next_request_id::bigint AS next_request_id,
       last_execution_id::bigint AS last_execution_id,
       last_instance_id::bigint AS last_instance_id,
       last_status::text AS last_status,
       last_params_hash::text AS last_params_hash,
       last_confirm_purge::boolean AS last_confirm_purge
FROM job_request_enqueue_state(@job::text);

-- name: JobRequestView :one
-- JobRequestView answers GET /v1/requests/{id} in one statement (it took
-- four, one round trip each): the request, its execution, and the figures
-- of that execution's instance across its executions (its committed chunks
-- and checkpoint parts, as JobCheckpointTotals adds them; its executions
-- and their calls, as JobInstanceExecutionTotals). Every part is a lookup
-- down an index (the request's and the execution's primary keys,
-- job_checkpoint's (instance_id, chunk) key, job_checkpoint_part's and
-- job_execution's instance indexes), so the plan stays the same however
-- much history there is. The execution's columns are NULL when the request
-- has none. The instance's planned chunks are the most any of its
-- executions planned (an execution that never started planned none).
SELECT sqlc.embed(r),
       e.id AS exec_id, e.instance_id AS exec_instance_id, e.status AS exec_status, e.stop_cause AS exec_stop_cause,
       e.started_at AS exec_started_at, e.ended_at AS exec_ended_at, e.last_updated AS exec_last_updated,
       e.exit_message AS exec_exit_message, e.chunks_total AS exec_chunks_total, e.chunks_done AS exec_chunks_done,
       e.chunks_before AS exec_chunks_before,
       e.targets AS exec_targets, e.items_written AS exec_items_written, e.items_skipped AS exec_items_skipped,
       e.items_failed AS exec_items_failed, e.external_calls AS exec_external_calls, e.domain_rows AS exec_domain_rows,
       coalesce(ct.chunks, 0)::bigint AS instance_chunks,
       (coalesce(ct.written, 0) + coalesce(pt.items, 0))::bigint AS instance_written,
       coalesce(ct.skipped, 0)::bigint AS instance_skipped,
       coalesce(ct.failed, 0)::bigint AS instance_failed,
       coalesce(et.executions, 0)::integer AS instance_executions,
       coalesce(et.external_calls, 0)::bigint AS instance_external_calls,
       coalesce(et.chunks_planned, 0)::integer AS instance_chunks_planned
FROM job_request r
LEFT JOIN job_execution e ON e.id = r.execution_id
LEFT JOIN LATERAL (
    SELECT count(*) AS chunks, sum(c.written) AS written, sum(c.skipped) AS skipped, sum(c.failed) AS failed
    FROM job_checkpoint c WHERE c.instance_id = e.instance_id
) ct ON true
LEFT JOIN LATERAL (
    SELECT sum(cardinality(p.items)) AS items FROM job_checkpoint_part p WHERE p.instance_id = e.instance_id
) pt ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS executions, sum(x.external_calls) AS external_calls, max(x.chunks_total) AS chunks_planned
    FROM job_execution x WHERE x.instance_id = e.instance_id
) et ON true
WHERE r.id = @id;

-- name: JobRequestGetByID :one
SELECT * FROM job_request WHERE id = @id;

-- name: JobRequestGetActiveByJob :one
SELECT * FROM job_request WHERE job = @job AND status IN ('QUEUED', 'RUNNING');

-- name: JobRequestList :many
-- JobRequestList pages every job's requests newest first (of one status
-- when status is given), before the cursor before_id; one job's are
-- JobRequestListByJob's. It is planned at each call (queries.PlanEachCall):
-- a NULL filter then drops out of the plan, and the page is a walk down
-- the primary key or job_request_status_id_idx.
SELECT * FROM job_request
WHERE (sqlc.narg('status')::text IS NULL OR status = sqlc.narg('status'))
  AND (sqlc.narg('before_id')::bigint IS NULL OR id < sqlc.narg('before_id'))
ORDER BY id DESC
LIMIT @max_rows;

-- name: JobRequestListByJob :many
-- JobRequestListByJob pages one job's requests newest first, as
-- JobRequestList does every job's, down job_request_job_id_idx (job, id
-- DESC): the job is a range ordered as the index (see JobListSummary), so
-- a job with few requests never walks the primary key past another job's.
-- The range positions the scan at the job's newest request, not at the
-- cursor: a page deep in one job's history reads the job's index entries
-- newer than the cursor (never a row of its table, nor another job's).
SELECT * FROM job_request
WHERE job >= @job::text AND job <= @job::text
  AND (sqlc.narg('status')::text IS NULL OR status = sqlc.narg('status'))
  AND (sqlc.narg('before_id')::bigint IS NULL OR id < sqlc.narg('before_id'))
ORDER BY job, id DESC
LIMIT @max_rows;

-- name: JobRequestListByOutcome :many
-- JobRequestListByOutcome is JobRequestList of the requests whose
-- execution ended with outcome (its final status: a run stopped by
-- maxCalls reads DONE as a request, STOPPED as an execution), and with
-- cause when given (its stop cause). It walks that outcome's executions
-- newest request first (job_execution_outcome_idx): a page costs its rows
-- whatever the history, for a rare outcome as for a common one.
SELECT sqlc.embed(job_request)
FROM job_execution e
JOIN job_request ON job_request.id = e.request_id
WHERE e.status = @outcome
  AND (sqlc.narg('cause')::text IS NULL OR e.stop_cause = sqlc.narg('cause'))
  AND (sqlc.narg('job')::text IS NULL OR job_request.job = sqlc.narg('job'))
  AND (sqlc.narg('status')::text IS NULL OR job_request.status = sqlc.narg('status'))
  -- The cursor bounds both sides of the join, so that neither is read
  -- from the newest row down to it.
  AND (sqlc.narg('before_id')::bigint IS NULL OR (e.request_id < sqlc.narg('before_id') AND job_request.id < sqlc.narg('before_id')))
ORDER BY e.request_id DESC
LIMIT @max_rows;

-- name: JobRequestListByOutcomeEnded :many
-- JobRequestListByOutcomeEnded is JobRequestListByOutcome of the executions
-- that ended on one day: day (YYYY-MM-DD; NULL: today) in time zone tz, by
-- the database's clock, the clock ended_at was written with. It finds
-- them down job_execution_outcome_ended_idx (status, ended_at), the day's
-- rows of that outcome whatever the history, and pages them newest
-- request first like JobRequestListByOutcome. The day's bounds are
-- written out in the condition (not read from a CTE) so that the planner,
-- planning at each call, sees the range it scans.
SELECT sqlc.embed(job_request)
FROM job_execution e
JOIN job_request ON job_request.id = e.request_id
WHERE e.status = @outcome
  AND e.ended_at >= (coalesce(CAST(sqlc.narg('day')::text AS date), (now() AT TIME ZONE @tz::text)::date)::timestamp AT TIME ZONE @tz::text)
  AND e.ended_at < ((coalesce(CAST(sqlc.narg('day')::text AS date), (now() AT TIME ZONE @tz::text)::date) + 1)::timestamp AT TIME ZONE @tz::text)
  AND (sqlc.narg('cause')::text IS NULL OR e.stop_cause = sqlc.narg('cause'))
  AND (sqlc.narg('job')::text IS NULL OR job_request.job = sqlc.narg('job'))
  AND (sqlc.narg('status')::text IS NULL OR job_request.status = sqlc.narg('status'))
  AND (sqlc.narg('before_id')::bigint IS NULL OR (e.request_id < sqlc.narg('before_id') AND job_request.id < sqlc.narg('before_id')))
ORDER BY e.request_id DESC
LIMIT @max_rows;

-- name: JobRequestClaim :one
-- JobRequestClaim moves a QUEUED request to RUNNING for one worker, in the
-- transaction that starts its run. It returns no row when the request is no
-- longer QUEUED.
UPDATE job_request
SET status = 'RUNNING', claimed_at = now(), worker_id = @worker_id
WHERE id = @id AND status = 'QUEUED'
RETURNING *;

-- name: JobRequestSetExecution :exec
UPDATE job_request SET execution_id = @execution_id WHERE id = @id;

-- name: JobRequestFinish :execrows
-- JobRequestFinish records a request's outcome, only while it is still
-- active, so that a result recorded meanwhile is never overwritten.
UPDATE job_request
SET status = @status, message = @message, finished_at = now()
WHERE id = @id AND status IN ('QUEUED', 'RUNNING');

-- name: JobRequestListRunningByWorker :many
SELECT * FROM job_request WHERE status = 'RUNNING' AND worker_id = @worker_id ORDER BY id;

-- name: JobRequestListQueued :many
SELECT * FROM job_request WHERE status = 'QUEUED' ORDER BY id;

-- name: JobRequestOldestQueuedByJob :many
-- JobRequestOldestQueuedByJob returns each job's oldest QUEUED request and
-- its age by the database's clock.
SELECT job, min(created_at)::timestamptz AS oldest_created_at, count(*) AS queued,
       extract(epoch FROM now() - min(created_at))::float8 AS oldest_age_seconds
FROM job_request WHERE status = 'QUEUED'
GROUP BY job;

-- name: JobRequestListStale :many
-- JobRequestListStale returns the active requests held by a worker whose
-- heartbeat is older than the stale window (or that never registered), with
-- the worker's last heartbeat and its age, both by the database's clock.
-- A QUEUED request is held by a worker only when that worker enqueued it to
-- run it itself (the CLI). Rows are locked, skipping ones another reaper
-- holds, so every worker may reap at once. Staleness is judged over time the
-- database was up: a heartbeat counts from the server's start at the
-- earliest, so a worker that beat before an outage (when nobody could beat)
-- is not stale the moment the database is back, but only if it stays silent
-- for the stale window after the restart.
SELECT r.id, r.job, r.status, r.worker_id, r.execution_id, r.river_job_id,
       w.heartbeat_at AS worker_heartbeat_at,
       coalesce(extract(epoch FROM now() - w.heartbeat_at), -1)::float8 AS heartbeat_age_seconds
FROM job_request r
LEFT JOIN worker w ON w.id = r.worker_id
WHERE r.status IN ('QUEUED', 'RUNNING')
  AND r.worker_id IS NOT NULL
  AND (sqlc.narg('job')::text IS NULL OR r.job = sqlc.narg('job'))
  AND (w.id IS NULL OR greatest(w.heartbeat_at, pg_postmaster_start_time()) < now() - make_interval(secs => @stale_seconds::float8))
ORDER BY r.id
FOR UPDATE OF r SKIP LOCKED;

-- name: JobRequestListPreviousBoot :many
-- JobRequestListPreviousBoot returns the active requests of earlier boots of
-- one pid@hostname slot (in a container the pid is always 1).
SELECT r.id, r.job, r.status, r.worker_id, r.execution_id, r.river_job_id
FROM job_request r
WHERE r.status IN ('QUEUED', 'RUNNING')
  AND r.worker_id LIKE @slot_prefix::text
  AND r.worker_id <> @current_id::text
ORDER BY r.id
FOR UPDATE OF r SKIP LOCKED;

-- name: JobRequestListOrphaned :many
-- JobRequestListOrphaned returns QUEUED requests that nobody will run and
-- that would block their job forever: their River job ended (or vanished)
-- without running them, or a worker fetched it and died before starting
-- the run (River names the fetching client, which is our worker id, last in
-- attempted_by). It reads River's job table directly, which River's public
-- API allows for nothing else here: JobList cannot join the request rows
-- and lock them in one statement, which the reapers need to agree.
SELECT r.id, r.job, r.river_job_id,
       coalesce(CASE WHEN j.state = 'running' THEN j.attempted_by[array_length(j.attempted_by, 1)] END, '')::text AS fetched_by,
       w.heartbeat_at AS fetched_by_heartbeat_at
FROM job_request r
LEFT JOIN river_job j ON j.id = r.river_job_id
LEFT JOIN worker w ON w.id = j.attempted_by[array_length(j.attempted_by, 1)]
WHERE r.status = 'QUEUED'
  AND r.river_job_id IS NOT NULL
  AND (sqlc.narg('job')::text IS NULL OR r.job = sqlc.narg('job'))
  AND (
    j.id IS NULL
    OR j.state IN ('cancelled', 'discarded', 'completed')
    OR (j.state = 'running' AND (w.id IS NULL OR greatest(w.heartbeat_at, pg_postmaster_start_time()) < now() - make_interval(secs => @stale_seconds::float8)))
  )
ORDER BY r.id
FOR UPDATE OF r SKIP LOCKED;

-- name: JobRequestActiveIDsByWorker :many
SELECT worker_id::text AS worker_id, array_agg(id ORDER BY id)::bigint[] AS request_ids
FROM job_request
WHERE status IN ('QUEUED', 'RUNNING') AND worker_id IS NOT NULL
GROUP BY worker_id;

-- name: JobRequestResumesToday :one
-- JobRequestResumesToday counts the automatic resumes of one instance since
-- the start of the day in time zone tz, by the database's clock (never a
-- process's: every worker and api counts the same day): the attempt limit
-- of the resume policy, which stops crash loops. Resumes of drains are not
-- counted: a drain is a deploy, not a failure, and a rolling deploy of a
-- large fleet must not spend the day's attempts. Nor are those of
-- provider-rate stops (each waits what the provider asked for) or of cap
-- stops (each waits for the next day's budget).
SELECT count(*) FROM job_request r
JOIN job_execution e ON e.id = r.resumes_execution_id
WHERE r.source = 'resume' AND e.instance_id = @instance_id
  AND r.resume_cause NOT IN ('drain', 'provider-rate', 'cap')
  AND r.created_at >= (date_trunc('day', now() AT TIME ZONE @tz::text) AT TIME ZONE @tz::text);

-- name: JobRequestSetResumeCause :exec
UPDATE job_request SET resume_cause = @resume_cause WHERE id = @id;

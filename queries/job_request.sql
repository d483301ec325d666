-- name: JobRequestInsert :one
INSERT INTO job_request (job, params, max_calls, confirm_purge, source, requested_by, estimated_calls, resumes_execution_id)
VALUES (@job, @params, sqlc.narg('max_calls'), @confirm_purge, @source, @requested_by, @estimated_calls, sqlc.narg('resumes_execution_id'))
RETURNING *;

-- name: JobRequestSetRiverJob :exec
UPDATE job_request SET river_job_id = @river_job_id WHERE id = @id;

-- name: JobRequestGetByID :one
SELECT * FROM job_request WHERE id = @id;

-- name: JobRequestGetActiveByJob :one
SELECT * FROM job_request WHERE job = @job AND status IN ('QUEUED', 'RUNNING');

-- name: JobRequestList :many
SELECT * FROM job_request
WHERE (sqlc.narg('job')::text IS NULL OR job = sqlc.narg('job'))
  AND (sqlc.narg('status')::text IS NULL OR status = sqlc.narg('status'))
  AND (sqlc.narg('before_id')::bigint IS NULL OR id < sqlc.narg('before_id'))
ORDER BY id DESC
LIMIT @max_rows;

-- name: JobRequestClaim :one
-- JobRequestClaim moves a QUEUED request to RUNNING for one worker. It
-- returns no row when the request is no longer QUEUED.
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
SELECT job, min(created_at)::timestamptz AS oldest_created_at, count(*) AS queued
FROM job_request WHERE status = 'QUEUED'
GROUP BY job;

-- name: AdvisoryXactLockJob :exec
-- AdvisoryXactLockJob serializes, per job name, every transaction that
-- creates an execution or enqueues a request (held until the tx ends).
SELECT pg_advisory_xact_lock(hashtextextended('buildrisk.job:' || @job::text, 0));

-- name: JobLockUnlessSettled :one
-- JobLockUnlessSettled returns the job's active request when the stale
-- cleanup could not free it, and otherwise takes the job's advisory lock
-- (AdvisoryXactLockJob's) and returns 0: the function
-- job_lock_unless_settled (migration 00007). stale_seconds <= 0 always
-- takes the lock.
SELECT job_lock_unless_settled(@job::text, @stale_seconds::float8)::bigint AS settled_request_id;

-- name: SessionTransactionTimeoutSet :exec
-- SessionTransactionTimeoutSet sets the session's transaction_timeout
-- (milliseconds; PostgreSQL 17 and later): the server ends any transaction
-- of the session older than that, however its client went silent. Run once
-- per new connection, only on a server that knows the setting (an older one
-- refuses it, as a startup parameter too).
SELECT set_config('transaction_timeout', @timeout_ms::text, false);

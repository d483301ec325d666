-- name: AdvisoryXactLockJob :exec
-- AdvisoryXactLockJob serializes, per job name, every transaction that
-- creates an execution or enqueues a request (held until the tx ends).
SELECT pg_advisory_xact_lock(hashtextextended('buildrisk.job:' || @job::text, 0));

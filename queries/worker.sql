-- name: WorkerUpsert :exec
INSERT INTO worker (id, hostname, pid, boot, status, configured_keys, version, daily_caps)
VALUES (@id, @hostname, @pid, @boot, @status, @configured_keys, @version, @daily_caps)
ON CONFLICT (id) DO UPDATE
SET status = excluded.status, configured_keys = excluded.configured_keys,
    version = excluded.version, daily_caps = excluded.daily_caps, heartbeat_at = now();

-- name: WorkerHeartbeat :execrows
UPDATE worker SET heartbeat_at = now(), status = @status WHERE id = @id;

-- name: WorkerGetByID :one
SELECT * FROM worker WHERE id = @id;

-- name: WorkerList :many
-- WorkerList pages the registry newest first; the cursor is the last row's
-- (started_at, id) of the previous page.
SELECT * FROM worker
WHERE sqlc.narg('before_started_at')::timestamptz IS NULL
   OR (started_at, id) < (sqlc.narg('before_started_at')::timestamptz, sqlc.narg('before_id')::text)
ORDER BY started_at DESC, id DESC
LIMIT @max_rows;

-- name: WorkerDeleteExpired :execrows
-- WorkerDeleteExpired removes registry rows whose heartbeat is older than
-- the retention window and that hold no active request (the reaper frees
-- those first), so the registry does not grow with every restart.
DELETE FROM worker w
WHERE w.heartbeat_at < now() - make_interval(secs => @retention_seconds::float8)
  AND NOT EXISTS (
    SELECT 1 FROM job_request r WHERE r.worker_id = w.id AND r.status IN ('QUEUED', 'RUNNING')
  );

-- name: WorkerCountAlive :one
SELECT count(*) FROM worker
WHERE status <> 'stopped' AND heartbeat_at >= now() - make_interval(secs => @stale_seconds::float8);

-- name: WorkerDailyCapsAlive :many
-- WorkerDailyCapsAlive returns the daily caps the live processes enforce,
-- the newest process first.
SELECT id, daily_caps FROM worker
WHERE status <> 'stopped' AND heartbeat_at >= now() - make_interval(secs => @stale_seconds::float8)
ORDER BY started_at DESC, id;

-- name: WorkerStaleBackendsTerminate :one
-- WorkerStaleBackendsTerminate ends the server backends of workers whose
-- heartbeat is older than the stale window (their connections carry the
-- worker id as application_name), waiting up to wait_ms for each to exit,
-- and returns how many ended: a dead worker's open transaction, and the
-- row locks it holds, never outlive the reap. Only backends the current
-- role may signal are chosen (a role's it is a member of, any non-superuser's when it
-- is a member of pg_signal_backend, every one when it is a superuser), so
-- the statement never fails for want of privilege.
SELECT (count(*) FILTER (WHERE pg_terminate_backend(a.pid, @wait_ms::bigint)))::bigint AS terminated
FROM pg_catalog.pg_stat_activity a
JOIN worker w ON w.id = a.application_name
WHERE w.heartbeat_at < now() - make_interval(secs => @stale_seconds::float8)
  AND a.pid <> pg_backend_pid()
  AND (
    coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user), false)
    OR (
      NOT coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid = a.usesysid), true)
      AND (
        pg_has_role(current_user, a.usesysid, 'MEMBER')
        OR pg_has_role(current_user, 'pg_signal_backend', 'MEMBER')
      )
    )
  );

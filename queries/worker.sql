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

-- name: WorkerUpsert :exec
INSERT INTO worker (id, hostname, pid, boot, status, configured_keys, version)
VALUES (@id, @hostname, @pid, @boot, @status, @configured_keys, @version)
ON CONFLICT (id) DO UPDATE
SET status = excluded.status, configured_keys = excluded.configured_keys,
    version = excluded.version, heartbeat_at = now();

-- name: WorkerHeartbeat :execrows
UPDATE worker SET heartbeat_at = now(), status = @status WHERE id = @id;

-- name: WorkerGetByID :one
SELECT * FROM worker WHERE id = @id;

-- name: WorkerList :many
SELECT * FROM worker ORDER BY started_at DESC, id;

-- name: WorkerCountAlive :one
SELECT count(*) FROM worker
WHERE status <> 'stopped' AND heartbeat_at >= now() - make_interval(secs => @stale_seconds::float8);

-- name: ProviderRateTake :one
-- ProviderRateTake reserves the next span_seconds of the shared call
-- schedule of a provider and returns the end of the reserved block (the new
-- tat) with the time of the statement, both on the clock of the database:
-- the block begins at tat - span, never before now, never before the end of
-- the blocks reserved earlier or a pushed Retry-After.
INSERT INTO provider_rate AS r (provider, tat)
VALUES (@provider, now() + make_interval(secs => @span_seconds::float8))
ON CONFLICT (provider) DO UPDATE
SET tat = greatest(r.tat, now()) + make_interval(secs => @span_seconds::float8)
RETURNING r.tat, now()::timestamptz AS db_now;

-- name: ProviderRatePush :exec
-- ProviderRatePush moves the shared call schedule of a provider to at least
-- wait_seconds from now (a Retry-After), so that no block of any worker
-- begins earlier. It never moves the schedule back.
INSERT INTO provider_rate AS r (provider, tat)
VALUES (@provider, now() + make_interval(secs => @wait_seconds::float8))
ON CONFLICT (provider) DO UPDATE
SET tat = greatest(r.tat, excluded.tat);

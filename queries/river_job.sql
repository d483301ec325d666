-- name: RiverJobFinalize :execrows
-- RiverJobFinalize cancels a River job that a dead worker left behind, so
-- the unique slot of its job is free again at once (River's own rescuer
-- would wait an hour and knows nothing of worker heartbeats).
UPDATE river_job
SET state = 'cancelled', finalized_at = now()
WHERE id = @id AND state IN ('available', 'pending', 'retryable', 'running', 'scheduled');

-- name: RiverJobGetState :one
SELECT state FROM river_job WHERE id = @id;

-- name: RiverJobWithdraw :exec
-- RiverJobWithdraw deletes a River job inserted earlier in the same
-- transaction, before anything else could see it: the enqueue withdraws the
-- job it sent early when the job's state calls for the stale cleanup first.
DELETE FROM river_job WHERE id = @id;

-- name: RiverJobFinalize :execrows
-- RiverJobFinalize cancels a River job that a dead worker left behind, so
-- the unique slot of its job is free again at once (River's own rescuer
-- would wait an hour and knows nothing of worker heartbeats).
UPDATE river_job
SET state = 'cancelled', finalized_at = now()
WHERE id = @id AND state IN ('available', 'pending', 'retryable', 'running', 'scheduled');

-- name: RiverJobGetState :one
SELECT state FROM river_job WHERE id = @id;

-- name: RiverJobSetRequestID :exec
-- RiverJobSetRequestID writes the request id into a River job's args in the
-- transaction that inserted both: the enqueue sends River's INSERT in its
-- first round trip, before the request id it reserves there is known, and
-- sets it with the COMMIT. Workers only ever see the committed args. The id
-- is no part of the job's unique key (RunArgs is unique by job name).
UPDATE river_job
SET args = jsonb_set(args, '{request_id}', to_jsonb(@request_id::bigint))
WHERE id = @id;

-- name: RiverJobWithdraw :exec
-- RiverJobWithdraw deletes a River job inserted earlier in the same
-- transaction, before anything else could see it: the enqueue withdraws the
-- job it sent early when the job's state calls for the stale cleanup first.
DELETE FROM river_job WHERE id = @id;

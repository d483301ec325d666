-- name: JobCheckpointInsert :exec
INSERT INTO job_checkpoint (instance_id, chunk, execution_id, targets, written, skipped, failed, skip_reason, external_calls)
VALUES (@instance_id, @chunk, @execution_id, @targets, @written, @skipped, @failed, @skip_reason, @external_calls);

-- name: JobCheckpointListChunks :many
SELECT chunk FROM job_checkpoint WHERE instance_id = @instance_id;

-- name: JobCheckpointTotals :one
SELECT count(*)::bigint AS chunks,
       coalesce(sum(targets), 0)::bigint AS targets,
       coalesce(sum(written), 0)::bigint AS written,
       coalesce(sum(skipped), 0)::bigint AS skipped,
       coalesce(sum(failed), 0)::bigint AS failed
FROM job_checkpoint WHERE instance_id = @instance_id;

-- name: JobCheckpointSkipReasons :many
SELECT skip_reason, sum(skipped)::bigint AS skipped
FROM job_checkpoint
WHERE instance_id = @instance_id AND skipped > 0
GROUP BY skip_reason
ORDER BY skip_reason;

-- name: JobCheckpointOwner :one
-- JobCheckpointOwner returns the execution that committed a chunk.
SELECT execution_id FROM job_checkpoint WHERE instance_id = @instance_id AND chunk = @chunk;

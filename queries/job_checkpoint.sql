-- name: JobCheckpointListChunks :many
SELECT chunk FROM job_checkpoint WHERE instance_id = @instance_id;

-- name: JobCheckpointTotals :one
-- JobCheckpointTotals adds up the instance's committed chunks and the items
-- committed in parts of chunks (each a target, written).
SELECT count(c.chunk)::bigint AS chunks,
       (coalesce(sum(c.targets), 0) + p.items)::bigint AS targets,
       (coalesce(sum(c.written), 0) + p.items)::bigint AS written,
       coalesce(sum(c.skipped), 0)::bigint AS skipped,
       coalesce(sum(c.failed), 0)::bigint AS failed
FROM (
    SELECT coalesce(sum(cardinality(jp.items)), 0)::bigint AS items
    FROM job_checkpoint_part jp WHERE jp.instance_id = @instance_id
) p
LEFT JOIN job_checkpoint c ON c.instance_id = @instance_id
GROUP BY p.items;

-- name: JobCheckpointSkipReasons :many
SELECT skip_reason, sum(skipped)::bigint AS skipped
FROM job_checkpoint
WHERE instance_id = @instance_id AND skipped > 0
GROUP BY skip_reason
ORDER BY skip_reason;

-- name: JobCheckpointOwner :one
-- JobCheckpointOwner returns the execution that committed a chunk.
SELECT execution_id FROM job_checkpoint WHERE instance_id = @instance_id AND chunk = @chunk;

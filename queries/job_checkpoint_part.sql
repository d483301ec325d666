-- name: JobCheckpointPartItems :many
-- JobCheckpointPartItems lists the items of the instance committed in parts
-- of chunks: a resume does not process them again.
SELECT unnest(items)::text AS item FROM job_checkpoint_part WHERE instance_id = @instance_id;

-- name: JobExecutionPartCommit :one
-- JobExecutionPartCommit is a part commit's bookkeeping in one statement: it
-- inserts the checkpoint part listing the items, moves the execution's
-- written count by them (the chunk still runs: chunks_done stays), and
-- returns the execution's status, which is how a fan-out chunk learns of a
-- stop (STOPPING) between parts. Fenced like every write of a run: no row
-- and no part unless the execution is still active under this worker and
-- lease epoch. It is the last statement of the part's transaction and locks
-- the execution row, so a reaper waits for the part's commit. A part is
-- inserted once (job_checkpoint_part_once_idx, by its first item): an
-- attempt retried while the first is still committing waits for it and
-- then inserts nothing, and the count moves only with an insert.
WITH owned AS (
    SELECT job_execution.id, job_execution.instance_id, job_execution.status
    FROM job_execution
    WHERE job_execution.id = @id
      AND execution_owned(job_execution, @worker_id::text, @lease_epoch::bigint)
    FOR UPDATE
), part AS (
    INSERT INTO job_checkpoint_part (instance_id, chunk, execution_id, items)
    SELECT owned.instance_id, @chunk::text, owned.id, @items::text[]
    FROM owned
    ON CONFLICT (instance_id, chunk, (items[1])) DO NOTHING
    RETURNING cardinality(items) AS n
), execution AS (
    UPDATE job_execution
    SET last_updated = now(),
        items_written = items_written + coalesce((SELECT part.n FROM part), 0)
    FROM owned
    WHERE job_execution.id = owned.id
)
SELECT radar_owned((SELECT owned.status FROM owned))::text AS status;

-- name: JobExecutionItemsFailed :execrows
-- JobExecutionItemsFailed counts failed items of a chunk that did not
-- commit (over its failure tolerance): they are this execution's outcome
-- although no checkpoint holds them, and stay targets of the instance.
-- Fenced like every write of a run.
UPDATE job_execution
SET last_updated = now(),
    items_failed = items_failed + @failed
WHERE job_execution.id = @id
  AND execution_owned(job_execution, @worker_id::text, @lease_epoch::bigint);

-- name: JobCheckpointPartHas :one
-- JobCheckpointPartHas reports whether an item is listed in a part of the
-- chunk committed by the execution: a part is one transaction, so its first
-- item tells whether a commit whose answer was lost landed.
SELECT EXISTS (
    SELECT 1 FROM job_checkpoint_part
    WHERE instance_id = @instance_id AND chunk = @chunk::text AND execution_id = @execution_id
      AND @item::text = ANY (items)
) AS has;

-- name: JobCheckpointPartMissing :many
-- JobCheckpointPartMissing returns the items, of those given, that no part
-- of the chunk lists: items whose part commit was acknowledged and is not
-- in the database (a failover to an asynchronous replica lost it).
SELECT item::text AS item FROM unnest(@items::text[]) AS item
EXCEPT
SELECT unnest(items) FROM job_checkpoint_part WHERE instance_id = @instance_id AND chunk = @chunk::text;

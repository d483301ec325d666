-- +goose Up
-- A part is committed once. Its items are unique within the instance, so
-- its first item names it; a part commit retried while its first attempt
-- is still committing (a statement timeout whose transaction went on to
-- commit) then finds this index taken, waits for the first attempt and
-- inserts nothing, and the execution's written count moves once
-- (JobExecutionPartCommit). Parts committed twice before this index are
-- folded into one first.
DELETE FROM job_checkpoint_part p
USING job_checkpoint_part q
WHERE p.instance_id = q.instance_id AND p.chunk = q.chunk AND p.items[1] = q.items[1] AND p.id > q.id;
CREATE UNIQUE INDEX job_checkpoint_part_once_idx ON job_checkpoint_part (instance_id, chunk, (items[1]));

-- +goose Down
DROP INDEX job_checkpoint_part_once_idx;

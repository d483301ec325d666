-- +goose Up
-- chunks_before is how many chunks of its instance earlier executions had
-- committed when the execution started (JobExecutionStart records it; 0 for
-- an instance's first execution). chunks_done and chunks_total stay the
-- run's view of the instance (its plan, and the chunks committed so far by
-- any execution), so an execution's own figures are chunks_done -
-- chunks_before (the chunks it committed, as its items and calls are its
-- own) and chunks_total - chunks_before (the chunks it had to do).
-- Adding a column with a constant default rewrites nothing.
ALTER TABLE job_execution ADD COLUMN chunks_before integer NOT NULL DEFAULT 0;
-- The executions that resumed an instance before this column: the chunks
-- they committed themselves are their checkpoints. Only executions after
-- the first of their instance are touched, a few among the history.
UPDATE job_execution e
SET chunks_before = greatest(e.chunks_done - (
        SELECT count(*) FROM job_checkpoint c WHERE c.instance_id = e.instance_id AND c.execution_id = e.id), 0)
WHERE e.chunks_done > 0
  AND EXISTS (SELECT 1 FROM job_execution p WHERE p.instance_id = e.instance_id AND p.id < e.id);

-- GET /v1/requests?outcome=&endedOn= finds the executions of one final
-- status that ended on one day down this index (JobRequestListByOutcomeEnded):
-- the console's "stopped or capped today" reads that day's rows, never the
-- outcome's whole history.
CREATE INDEX job_execution_outcome_ended_idx ON job_execution (status, ended_at);

-- +goose Down
DROP INDEX job_execution_outcome_ended_idx;
ALTER TABLE job_execution DROP COLUMN chunks_before;

-- +goose Up
-- JobFreshnessByJob, read at every scrape of every process, finds each
-- job's newest COMPLETED execution down this index (one probe per job);
-- without it the newest completion of a job could only be found by
-- reading the job's executions, or every execution, which it did.
CREATE INDEX job_execution_completed_idx ON job_execution (job, ended_at DESC)
    WHERE status = 'COMPLETED' AND ended_at IS NOT NULL;

-- +goose Down
DROP INDEX job_execution_completed_idx;

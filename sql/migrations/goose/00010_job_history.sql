-- +goose Up
-- GET /v1/jobs/{job}/history finds each day's newest execution of a job
-- down this index (one probe per day), however much history there is.
CREATE INDEX job_execution_job_started_idx ON job_execution (job, started_at DESC, id DESC);

-- +goose Down
DROP INDEX job_execution_job_started_idx;

-- +goose Up
-- resume_at is the earliest time the automatic resume of a stopped
-- execution may start, by the database's clock: for stop cause
-- provider-rate, when the provider's Retry-After said to come back. It is
-- recorded with the stop cause, so whoever finishes the request (the
-- runner, or the reconcile loop when the runner could not) schedules the
-- resume for the same moment. NULL: no time of its own.
ALTER TABLE job_execution ADD COLUMN resume_at timestamptz;

-- +goose Down
ALTER TABLE job_execution DROP COLUMN resume_at;

-- +goose Up

-- A run that infrastructure stopped (a drain, a reap of a dead worker, a lost
-- lease, a database outage it could not ride out) is resumed by a request the
-- system inserts itself: source 'resume', with the cause that made it.
ALTER TABLE job_request DROP CONSTRAINT job_request_source_check;
ALTER TABLE job_request ADD CONSTRAINT job_request_source_check
    CHECK (source IN ('api', 'schedule', 'cli', 'chain', 'resume'));
ALTER TABLE job_request ADD COLUMN resume_cause text NOT NULL DEFAULT '';

-- stop_cause says why an execution that did not complete ended (drain,
-- reap, ownership, database, operator, cap, max_calls, failure), so whoever
-- finishes its request (the runner, the reconcile loop, the reaper) applies
-- the same resume policy.
ALTER TABLE job_execution ADD COLUMN stop_cause text NOT NULL DEFAULT '';

-- The attempt limit counts today's automatic resumes of one instance.
CREATE INDEX job_request_resume_idx ON job_request (resumes_execution_id) WHERE source = 'resume';

-- +goose Down
DROP INDEX job_request_resume_idx;
ALTER TABLE job_execution DROP COLUMN stop_cause;
ALTER TABLE job_request DROP COLUMN resume_cause;
ALTER TABLE job_request DROP CONSTRAINT job_request_source_check;
ALTER TABLE job_request ADD CONSTRAINT job_request_source_check
    CHECK (source IN ('api', 'schedule', 'cli', 'chain'));

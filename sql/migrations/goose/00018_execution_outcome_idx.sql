-- +goose Up
-- GET /v1/requests?outcome= walks the executions of one final status,
-- newest request first, down this index (JobRequestListByOutcome): a page
-- reads its own rows however much history there is.
CREATE INDEX job_execution_outcome_idx ON job_execution (status, request_id DESC);

-- +goose Down
DROP INDEX job_execution_outcome_idx;

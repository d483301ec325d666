-- +goose Up
-- forecast_done_at is when the running execution expects to end, as its run
-- last forecast it from its own measured pace and its provider's budget
-- (queue/forecast); NULL before the run has a pace, and once it ended. The
-- run rewrites it every few seconds (a fenced write, like every write of a
-- run); the api's job list and the deadline gauges read it. Adding a
-- nullable column rewrites nothing.
ALTER TABLE job_execution ADD COLUMN forecast_done_at timestamptz;

-- +goose Down
ALTER TABLE job_execution DROP COLUMN forecast_done_at;

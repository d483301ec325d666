-- +goose Up
-- forecast_done_at is when the running execution expects to end, as its run
-- last forecast it from its own measured pace and its provider's budget
-- (queue/forecast); NULL before the run has a pace. Only an active
-- execution's is read: the run rewrites it every few seconds (a fenced
-- write, like every write of a run) and leaves its last one when it ends. The
-- api's job list and the deadline gauges read it. Adding a
-- nullable column rewrites nothing.
ALTER TABLE job_execution ADD COLUMN forecast_done_at timestamptz;

-- +goose Down
ALTER TABLE job_execution DROP COLUMN forecast_done_at;

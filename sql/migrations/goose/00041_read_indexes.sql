-- +goose Up
-- Indexes for the queries a run or the API issues, so that reads cost the
-- same with years of history as on the first day.

-- The active executions (STARTING, STARTED, STOPPING) are a handful among
-- every execution ever run: "is this job running", stop, the job list.
CREATE INDEX job_execution_active_idx ON job_execution (job, id DESC)
    WHERE status IN ('STARTING', 'STARTED', 'STOPPING');

-- aptTrade counts its domain rows by execution at the end of every run.
CREATE INDEX apt_trade_execution_idx ON apt_trade (execution_id);

-- GET /v1/workers pages newest first; retention and the live count read
-- the heartbeat.
CREATE INDEX worker_started_idx ON worker (started_at DESC, id DESC);
CREATE INDEX worker_heartbeat_idx ON worker (heartbeat_at);

-- +goose Down
DROP INDEX worker_heartbeat_idx;
DROP INDEX worker_started_idx;
DROP INDEX apt_trade_execution_idx;
DROP INDEX job_execution_active_idx;

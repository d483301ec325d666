-- +goose Up
-- daily_caps is the daily call cap per provider that the worker (or `radar
-- run` CLI) enforces, as it was configured when the process registered
-- (BUILDRISK_DAILY_CAP_<P>): {"KRX": 320, ...}. The api reads it from the
-- live processes for GET /v1/providers instead of its own environment, so
-- the cap it shows is the one enforced, and it can say which process
-- reported it when they disagree. '{}' for a process of an older version.
ALTER TABLE worker ADD COLUMN daily_caps jsonb NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE worker DROP COLUMN daily_caps;

-- +goose Up

-- schedule_tick is the durable record of a job's schedule: one row per
-- (job, due time), written in the transaction that inserts the due time's
-- request, so that no due time is ever enqueued twice (two leaders, or a
-- leader and its successor, both meet the primary key) and none is lost
-- without a trace (a due time the scheduler could not enqueue in time is
-- recorded missed).
--
-- outcome:
--   enqueued  the due time's request was inserted (request_id).
--   deferred  the job had an active request: the due time waits, with its
--             params, and is enqueued (becoming enqueued) when that request
--             ends. At most one row per job and params hash is deferred.
--   coalesced the due time's params equal those of a request not yet
--             started or of a deferred due time (coalesced_into): that run
--             serves both.
--   missed    the due time was older than the catch-up window when a
--             scheduler first saw it.
--   failed    its params or estimate were refused (message); not retried.
--
-- spec is the schedule the due time belongs to.
CREATE TABLE schedule_tick (
    job            text        NOT NULL,
    due_at         timestamptz NOT NULL,
    spec           text        NOT NULL DEFAULT '',
    outcome        text        NOT NULL CHECK (outcome IN ('enqueued', 'deferred', 'coalesced', 'missed', 'failed')),
    params         jsonb,
    params_hash    text        NOT NULL DEFAULT '',
    request_id     bigint      REFERENCES job_request (id),
    coalesced_into timestamptz,
    message        text        NOT NULL DEFAULT '',
    recorded_at    timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job, due_at)
);
CREATE INDEX schedule_tick_deferred_idx ON schedule_tick (job, due_at) WHERE outcome = 'deferred';
CREATE UNIQUE INDEX schedule_tick_deferred_params_idx ON schedule_tick (job, params_hash) WHERE outcome = 'deferred';

-- job_schedule remembers since when each job has had its current schedule
-- (the first scheduler pass that saw it): catch-up starts there for a job
-- with no due time recorded yet, so the very first due time is not lost
-- when the leader that saw the schedule dies before it. A changed spec
-- starts afresh (its predecessor's gaps are not its due times).
CREATE TABLE job_schedule (
    job        text        PRIMARY KEY,
    spec       text        NOT NULL,
    since      timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- A scheduled request names the due time it was made for; two requests for
-- the same job and due time are impossible.
ALTER TABLE job_request ADD COLUMN due_at timestamptz;
CREATE UNIQUE INDEX job_request_due_idx ON job_request (job, due_at) WHERE due_at IS NOT NULL;

-- Schedule ticks used to be River periodic jobs of kind buildrisk_schedule;
-- the scheduler now inserts requests itself, and no worker runs that kind.
DELETE FROM river_job WHERE kind = 'buildrisk_schedule' AND state IN ('available', 'pending', 'retryable', 'scheduled');

-- +goose Down
DROP INDEX job_request_due_idx;
ALTER TABLE job_request DROP COLUMN due_at;
DROP TABLE job_schedule;
DROP TABLE schedule_tick;

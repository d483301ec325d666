-- +goose Up

-- The queue core: requests (the queue record and the audit record), job
-- instances and their executions, checkpoints, the worker registry and the
-- durable schedule. River's own tables are River's (rivermigrate applies
-- them before this); nothing here touches them.

-- job_request is both the queue record and the audit record: River's own rows
-- are cleaned after a day, these are kept.
CREATE TABLE job_request (
    id                   bigserial PRIMARY KEY,
    job                  text        NOT NULL,
    params               jsonb       NOT NULL DEFAULT '{}',
    params_hash          text        NOT NULL DEFAULT '',
    max_calls            integer,
    confirm_purge        boolean     NOT NULL DEFAULT false,
    source               text        NOT NULL CHECK (source IN ('api', 'schedule', 'cli', 'chain', 'resume')),
    requested_by         text        NOT NULL DEFAULT '',
    status               text        NOT NULL DEFAULT 'QUEUED' CHECK (status IN ('QUEUED', 'RUNNING', 'DONE', 'FAILED')),
    estimated_calls      integer     NOT NULL DEFAULT 0,
    resumes_execution_id bigint,
    river_job_id         bigint,
    execution_id         bigint,
    worker_id            text,
    message              text        NOT NULL DEFAULT '',
    created_at           timestamptz NOT NULL DEFAULT now(),
    claimed_at           timestamptz,
    finished_at          timestamptz,
    -- due_at is the due time a scheduled request was made for; two requests
    -- for the same job and due time are impossible.
    due_at               timestamptz,
    -- resume_cause is why the system inserted a 'resume' request itself.
    resume_cause         text        NOT NULL DEFAULT ''
);

-- One active request per job, decided by the database: the enqueue takes the
-- job's advisory lock, and this index refuses what the lock would miss.
CREATE UNIQUE INDEX job_request_active_job_idx ON job_request (job) WHERE status IN ('QUEUED', 'RUNNING');
CREATE INDEX job_request_job_id_idx ON job_request (job, id DESC);
CREATE INDEX job_request_status_id_idx ON job_request (status, id DESC);
CREATE INDEX job_request_running_worker_idx ON job_request (worker_id) WHERE status = 'RUNNING';
CREATE UNIQUE INDEX job_request_due_idx ON job_request (job, due_at) WHERE due_at IS NOT NULL;
-- The attempt limit counts today's automatic resumes of one instance.
CREATE INDEX job_request_resume_idx ON job_request (resumes_execution_id) WHERE source = 'resume';

-- job_instance is one job with one set of canonical params; executions of the
-- same instance share its checkpoints, which is what makes a restart a resume.
CREATE TABLE job_instance (
    id            bigserial PRIMARY KEY,
    job           text        NOT NULL,
    params        jsonb       NOT NULL,
    params_hash   text        NOT NULL,
    confirm_purge boolean     NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    lease_epoch   bigint      NOT NULL DEFAULT 0
);
CREATE INDEX job_instance_job_id_idx ON job_instance (job, id DESC);

-- Fencing. An execution is owned by one worker under one lease epoch: every
-- execution of an instance takes the instance's next epoch when it starts
-- (a resume included), and every write a run makes is conditional on its
-- execution still being active under that worker and epoch, and on the
-- instance's epoch still being that one. A run whose execution was
-- abandoned, or whose instance a newer execution took over, writes nothing.
CREATE TABLE job_execution (
    id             bigserial PRIMARY KEY,
    instance_id    bigint      NOT NULL REFERENCES job_instance (id),
    job            text        NOT NULL,
    request_id     bigint      NOT NULL REFERENCES job_request (id),
    status         text        NOT NULL CHECK (status IN ('STARTING', 'STARTED', 'STOPPING', 'STOPPED', 'COMPLETED', 'FAILED', 'ABANDONED')),
    worker_id      text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    started_at     timestamptz,
    ended_at       timestamptz,
    last_updated   timestamptz NOT NULL DEFAULT now(),
    exit_message   text        NOT NULL DEFAULT '',
    chunks_total   integer     NOT NULL DEFAULT 0,
    chunks_done    integer     NOT NULL DEFAULT 0,
    targets        bigint      NOT NULL DEFAULT 0,
    items_written  bigint      NOT NULL DEFAULT 0,
    items_skipped  bigint      NOT NULL DEFAULT 0,
    items_failed   bigint      NOT NULL DEFAULT 0,
    external_calls integer     NOT NULL DEFAULT 0,
    domain_rows    bigint,
    lease_epoch    bigint      NOT NULL DEFAULT 0,
    -- stop_cause says why an execution that did not complete ended (drain,
    -- reap, ownership, database, operator, cap, max_calls, failure), so
    -- whoever finishes its request (the runner, the reconcile loop, the
    -- reaper) applies the same resume policy.
    stop_cause     text        NOT NULL DEFAULT ''
);
CREATE INDEX job_execution_instance_id_idx ON job_execution (instance_id, id DESC);
CREATE INDEX job_execution_job_id_idx ON job_execution (job, id DESC);
CREATE INDEX job_execution_request_idx ON job_execution (request_id);
-- The active executions (STARTING, STARTED, STOPPING) are a handful among
-- every execution ever run: "is this job running", stop, the job list.
CREATE INDEX job_execution_active_idx ON job_execution (job, id DESC)
    WHERE status IN ('STARTING', 'STARTED', 'STOPPING');

-- job_checkpoint records one committed chunk of an instance. A chunk with a
-- checkpoint is never processed again by a resuming execution.
CREATE TABLE job_checkpoint (
    instance_id    bigint      NOT NULL REFERENCES job_instance (id),
    chunk          text        NOT NULL,
    execution_id   bigint      NOT NULL REFERENCES job_execution (id),
    targets        bigint      NOT NULL DEFAULT 0,
    written        bigint      NOT NULL DEFAULT 0,
    skipped        bigint      NOT NULL DEFAULT 0,
    failed         bigint      NOT NULL DEFAULT 0,
    skip_reason    text        NOT NULL DEFAULT '',
    external_calls integer     NOT NULL DEFAULT 0,
    committed_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (instance_id, chunk)
);

CREATE TABLE worker (
    id              text PRIMARY KEY,
    hostname        text        NOT NULL,
    pid             integer     NOT NULL,
    boot            text        NOT NULL,
    started_at      timestamptz NOT NULL DEFAULT now(),
    heartbeat_at    timestamptz NOT NULL DEFAULT now(),
    status          text        NOT NULL DEFAULT 'running',
    configured_keys text[]      NOT NULL DEFAULT '{}',
    version         text        NOT NULL DEFAULT '',
    -- daily_caps is the daily call cap per provider that the worker (or
    -- `radar run`) enforces, as configured when the process registered
    -- (BUILDRISK_DAILY_CAP_<P>): {"KRX": 320, ...}. The api reads it from
    -- the live processes for GET /v1/providers instead of its own
    -- environment, so the cap it shows is the one enforced, and it can say
    -- which process reported it when they disagree.
    daily_caps      jsonb       NOT NULL DEFAULT '{}'
);
-- GET /v1/workers pages newest first; retention and the live count read
-- the heartbeat.
CREATE INDEX worker_started_idx ON worker (started_at DESC, id DESC);
CREATE INDEX worker_heartbeat_idx ON worker (heartbeat_at);

-- job_checkpoint_part records items of a chunk that committed before the
-- chunk itself: a fan-out chunk commits each finished item's result, in
-- groups of whatever finished together, as it goes and when it ends early
-- (drain, stop, daily cap, maxCalls, failure), so that what was paid for is
-- kept. A resume processes only the items no part lists. The chunk's own
-- checkpoint, when it commits, counts only the items not in a part; the
-- instance's totals add both (each item is written once, in one of them).
CREATE TABLE job_checkpoint_part (
    id           bigserial   PRIMARY KEY,
    instance_id  bigint      NOT NULL REFERENCES job_instance (id),
    chunk        text        NOT NULL,
    execution_id bigint      NOT NULL REFERENCES job_execution (id),
    items        text[]      NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_checkpoint_part_instance_idx ON job_checkpoint_part (instance_id);

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

-- radar_owned passes a fenced statement's execution status through, or
-- raises SQLSTATE BR001 when the statement found no execution (NULL): the
-- run lost its ownership. A fenced commit that finds no row must undo the
-- writes sent with it; inside an explicit transaction the worker could roll
-- back itself, but a commit sent as one implicit transaction (a pipelined
-- batch, one round trip) is committed by the server unless a statement
-- fails, so the fence has to fail.
-- +goose StatementBegin
CREATE FUNCTION radar_owned(status text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    IF status IS NULL THEN
        RAISE EXCEPTION 'the execution is no longer active under this worker and lease epoch'
            USING ERRCODE = 'BR001';
    END IF;
    RETURN status;
END
$$;
-- +goose StatementEnd

-- job_request_enqueue_state reads what an enqueue decides on, under the
-- job's advisory lock (taken by the caller just before): the job's active
-- request (0: none), a new request id, and the newest execution of the
-- job's newest instance with that instance's identity (execution id 0:
-- none). It is the statement JobRequestEnqueueState ran before, moved into
-- a function because the api runs its statements unprepared (planned at
-- every call): planning the lateral join cost every enqueue 0.3–0.5 ms of
-- server time between its BEGIN (the request's created_at) and River's
-- insert, four times what running it costs. PL/pgSQL keeps the plan of its
-- query for the session, through PgBouncer too (the plan lives in the
-- server's backend, not in the client's session state). The function is
-- VOLATILE (nextval), so its query reads with a snapshot taken after the
-- lock is held. A request id is drawn only for a job without an active
-- request: a duplicate (409) draws none.
-- +goose StatementBegin
CREATE FUNCTION job_request_enqueue_state(p_job text)
RETURNS TABLE (
    active_request_id  bigint,
    next_request_id    bigint,
    last_execution_id  bigint,
    last_instance_id   bigint,
    last_status        text,
    last_params_hash   text,
    last_confirm_purge boolean
)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN QUERY
    WITH active AS (
        SELECT r.id FROM job_request r WHERE r.job = p_job AND r.status IN ('QUEUED', 'RUNNING')
    )
    SELECT coalesce((SELECT a.id FROM active a), 0)::bigint,
           CASE WHEN EXISTS (SELECT 1 FROM active) THEN 0
                ELSE nextval(pg_get_serial_sequence('job_request', 'id')) END::bigint,
           coalesce(last.id, 0)::bigint,
           coalesce(last.instance_id, 0)::bigint,
           coalesce(last.status, '')::text,
           coalesce(last.params_hash, '')::text,
           coalesce(last.confirm_purge, false)::boolean
    FROM (SELECT 1) AS one
    LEFT JOIN LATERAL (
        SELECT e.id, e.instance_id, e.status, i.params_hash, i.confirm_purge
        FROM job_execution e
        JOIN job_instance i ON i.id = e.instance_id
        WHERE i.id = (SELECT max(ji.id) FROM job_instance ji WHERE ji.job = p_job)
        ORDER BY e.id DESC
        LIMIT 1
    ) AS last ON true;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION job_request_enqueue_state(text);
DROP FUNCTION radar_owned(text);
DROP TABLE job_schedule;
DROP TABLE schedule_tick;
DROP TABLE job_checkpoint_part;
DROP TABLE worker;
DROP TABLE job_checkpoint;
DROP TABLE job_execution;
DROP TABLE job_instance;
DROP TABLE job_request;

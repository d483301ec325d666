-- +goose Up

-- job_request is both the queue record and the audit record: River's own rows
-- are cleaned after a day, these are kept.
CREATE TABLE job_request (
    id                   bigserial PRIMARY KEY,
    job                  text        NOT NULL,
    params               jsonb       NOT NULL DEFAULT '{}',
    params_hash          text        NOT NULL DEFAULT '',
    max_calls            integer,
    confirm_purge        boolean     NOT NULL DEFAULT false,
    source               text        NOT NULL CHECK (source IN ('api', 'schedule', 'cli', 'chain')),
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
    finished_at          timestamptz
);

-- One active request per job, decided by the database (backs River's unique insert).
CREATE UNIQUE INDEX job_request_active_job_idx ON job_request (job) WHERE status IN ('QUEUED', 'RUNNING');
CREATE INDEX job_request_job_id_idx ON job_request (job, id DESC);
CREATE INDEX job_request_status_id_idx ON job_request (status, id DESC);
CREATE INDEX job_request_running_worker_idx ON job_request (worker_id) WHERE status = 'RUNNING';

-- job_instance is one job with one set of canonical params; executions of the
-- same instance share its checkpoints, which is what makes a restart a resume.
CREATE TABLE job_instance (
    id            bigserial PRIMARY KEY,
    job           text        NOT NULL,
    params        jsonb       NOT NULL,
    params_hash   text        NOT NULL,
    confirm_purge boolean     NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_instance_job_id_idx ON job_instance (job, id DESC);

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
    domain_rows    bigint
);
CREATE INDEX job_execution_instance_id_idx ON job_execution (instance_id, id DESC);
CREATE INDEX job_execution_job_id_idx ON job_execution (job, id DESC);
CREATE INDEX job_execution_request_idx ON job_execution (request_id);

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
    version         text        NOT NULL DEFAULT ''
);

-- provider_call_budget holds the daily call caps shared by every worker.
CREATE TABLE provider_call_budget (
    provider   text    NOT NULL,
    day        date    NOT NULL,
    calls_used integer NOT NULL DEFAULT 0,
    PRIMARY KEY (provider, day)
);

CREATE TABLE apt_trade (
    region          text        NOT NULL,
    deal_ym         text        NOT NULL,
    serial          text        NOT NULL,
    apt_name        text        NOT NULL,
    dong            text        NOT NULL DEFAULT '',
    deal_date       date        NOT NULL,
    deal_amount_krw bigint      NOT NULL,
    area_m2         numeric(10, 2) NOT NULL,
    floor           integer     NOT NULL DEFAULT 0,
    build_year      integer     NOT NULL DEFAULT 0,
    execution_id    bigint      NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (region, deal_ym, serial)
);

-- +goose Down
DROP TABLE apt_trade;
DROP TABLE provider_call_budget;
DROP TABLE worker;
DROP TABLE job_checkpoint;
DROP TABLE job_execution;
DROP TABLE job_instance;
DROP TABLE job_request;

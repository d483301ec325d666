-- The subset of River's schema (owned and migrated by rivermigrate) that the
-- application's own queries touch. It is only read by sqlc, never applied.
CREATE TYPE river_job_state AS ENUM (
    'available', 'cancelled', 'completed', 'discarded', 'pending', 'retryable', 'running', 'scheduled'
);

CREATE TABLE river_job (
    id           bigserial PRIMARY KEY,
    state        river_job_state NOT NULL DEFAULT 'available',
    attempt      smallint        NOT NULL DEFAULT 0,
    attempted_at timestamptz,
    attempted_by text[],
    created_at   timestamptz     NOT NULL DEFAULT now(),
    errors       jsonb[],
    finalized_at timestamptz,
    kind         text            NOT NULL,
    args         jsonb           NOT NULL DEFAULT '{}',
    metadata     jsonb           NOT NULL DEFAULT '{}'
);

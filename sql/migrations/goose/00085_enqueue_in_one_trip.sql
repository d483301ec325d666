-- +goose Up

-- The enqueue's common case (the job has no active request) is decided by
-- the server, so that BEGIN, the job's lock, River's INSERT, the request row
-- and COMMIT travel in one round trip: the request's created_at is its
-- BEGIN, and every round trip between BEGIN and COMMIT is pickup latency.
-- The partial unique index on active requests refuses a second one, and
-- the two functions below supply what the client decided before: the
-- restart rule's answer and the id of the River job just inserted. Whatever
-- they cannot settle raises, the transaction rolls back, and the client
-- decides again in its slower path (the stale cleanup, a duplicate's 409).

-- job_request_resumes is the restart rule (docs/architecture.md): the id of
-- the execution a new request with p_params_hash and p_confirm_purge
-- resumes, or NULL when the request starts a new instance. The job's
-- newest execution (of its newest instance) resumes when it ended STOPPED,
-- FAILED or ABANDONED, its params equal the new ones, and neither side
-- carries confirmPurge (a confirmation is valid for its own request only).
-- The caller holds the job's advisory lock.
-- +goose StatementBegin
CREATE FUNCTION job_request_resumes(p_job text, p_params_hash text, p_confirm_purge boolean)
RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    last_id bigint;
BEGIN
    IF p_confirm_purge THEN
        RETURN NULL;
    END IF;
    SELECT e.id INTO last_id
    FROM job_execution e
    JOIN job_instance i ON i.id = e.instance_id
    WHERE i.id = (SELECT max(ji.id) FROM job_instance ji WHERE ji.job = p_job)
      AND e.status IN ('STOPPED', 'FAILED', 'ABANDONED')
      AND i.params_hash = p_params_hash
      AND NOT i.confirm_purge
      AND e.id = (SELECT max(le.id) FROM job_execution le WHERE le.instance_id = i.id);
    RETURN last_id;
END
$$;
-- +goose StatementEnd

-- radar_inserted_river_job returns the id of the River job this
-- transaction's last River INSERT wrote, or raises SQLSTATE BR002 when that
-- INSERT wrote none: River found a job holding the unique slot and skipped
-- its own (its INSERT takes a new id from the sequence either way, and
-- updates the job it found in place, so the newest id names no row of this
-- transaction). The enqueue then decides in the client.
-- +goose StatementBegin
CREATE FUNCTION radar_inserted_river_job() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    newest   bigint := currval('river_job_id_seq'); -- volatile: read once, so the lookup uses the primary key
    inserted bigint;
BEGIN
    SELECT j.id INTO inserted FROM river_job j
    WHERE j.id = newest AND j.xmin = pg_current_xact_id()::xid;
    IF inserted IS NULL THEN
        RAISE EXCEPTION 'the River insert of this transaction wrote no job'
            USING ERRCODE = 'BR002';
    END IF;
    RETURN inserted;
END
$$;
-- +goose StatementEnd

-- A buildrisk_run job announces itself at the COMMIT that makes it
-- visible, in the same message River's own insert notification uses (the
-- topic river_insert under the current schema, the job's queue as JSON:
-- River v0.51's PGNotifyMany). River's inserting client sends its
-- notification only after it has read its INSERT's answer, which in the
-- one-round-trip enqueue is after the COMMIT: one more client turn and
-- round trip before the worker hears of the job. This trigger has it
-- delivered at the COMMIT itself, for every inserting client alike (api,
-- schedules, chains, CLI). River's own notification still follows; a
-- worker's producer coalesces the two into its fetch limiter.
-- +goose StatementBegin
CREATE FUNCTION river_job_notify_run_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(current_schema() || '.river_insert', json_build_object('queue', NEW.queue)::text);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER river_job_notify_run_insert
AFTER INSERT ON river_job
FOR EACH ROW
WHEN (NEW.kind = 'buildrisk_run' AND NEW.state = 'available')
EXECUTE FUNCTION river_job_notify_run_insert();

-- +goose Down
DROP TRIGGER river_job_notify_run_insert ON river_job;
DROP FUNCTION river_job_notify_run_insert();
DROP FUNCTION radar_inserted_river_job();
DROP FUNCTION job_request_resumes(text, text, boolean);

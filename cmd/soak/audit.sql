-- The soak's audit: triggers the harness installs in its own database after
-- `radar migrate`, so the invariant checks can see every committed write to
-- an execution and every checkpoint, with the wall-clock time it happened and
-- the process that made it (each process the harness starts connects with its
-- own application_name, through PGAPPNAME). It is instrumentation of the test
-- database, not part of the product's schema: it takes no locks of its own,
-- and a rolled-back transaction leaves no audit row.
CREATE TABLE soak_audit (
    id           bigserial   PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    kind         text        NOT NULL CHECK (kind IN ('insert', 'update', 'checkpoint')),
    execution_id bigint      NOT NULL,
    job          text        NOT NULL,
    instance_id  bigint      NOT NULL,
    exec_worker  text        NOT NULL,
    old_status   text,
    new_status   text,
    -- counters says whether an update moved the execution's figures
    -- (chunks, items, calls, targets, domain rows): work, not a status change.
    counters     boolean     NOT NULL DEFAULT false,
    chunk        text,
    writer       text        NOT NULL DEFAULT current_setting('application_name')
);
CREATE INDEX soak_audit_execution_idx ON soak_audit (execution_id, at);

CREATE FUNCTION soak_audit_execution() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO soak_audit (kind, execution_id, job, instance_id, exec_worker, new_status)
        VALUES ('insert', NEW.id, NEW.job, NEW.instance_id, NEW.worker_id, NEW.status);
    ELSE
        INSERT INTO soak_audit (kind, execution_id, job, instance_id, exec_worker, old_status, new_status, counters)
        VALUES ('update', NEW.id, NEW.job, NEW.instance_id, NEW.worker_id, OLD.status, NEW.status,
                (OLD.chunks_done, OLD.items_written, OLD.items_skipped, OLD.items_failed, OLD.external_calls, OLD.targets, OLD.domain_rows)
                IS DISTINCT FROM
                (NEW.chunks_done, NEW.items_written, NEW.items_skipped, NEW.items_failed, NEW.external_calls, NEW.targets, NEW.domain_rows));
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER soak_audit_execution AFTER INSERT OR UPDATE ON job_execution
    FOR EACH ROW EXECUTE FUNCTION soak_audit_execution();

-- A checkpoint is audited at its transaction's commit (a deferred constraint
-- trigger), with the execution's status as it is then: a checkpoint that
-- commits into an execution another transaction has already ended shows up
-- with that end status.
CREATE FUNCTION soak_audit_checkpoint() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    e job_execution%ROWTYPE;
BEGIN
    SELECT * INTO e FROM job_execution WHERE id = NEW.execution_id;
    INSERT INTO soak_audit (kind, execution_id, job, instance_id, exec_worker, new_status, chunk)
    VALUES ('checkpoint', NEW.execution_id, coalesce(e.job, ''), NEW.instance_id, coalesce(e.worker_id, ''), e.status, NEW.chunk);
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER soak_audit_checkpoint AFTER INSERT ON job_checkpoint
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION soak_audit_checkpoint();

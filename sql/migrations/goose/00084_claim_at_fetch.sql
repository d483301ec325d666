-- +goose Up

-- A request is claimed in the statement that hands its River job to a
-- worker. River's fetch moves the job to 'running' and appends the
-- fetching client's id (the worker's id) to attempted_by; this trigger
-- records that worker on the job's request, with claimed_at the fetch's
-- time, in the same statement. So the request and its River job never
-- disagree about who has it, and claimed_at is the moment a worker took the
-- request, not the moment it got round to a statement of its own (River's
-- hand-over to the executor and a round trip, about 0.6 ms on an idle
-- machine). The request stays QUEUED until the worker starts the run: its
-- start transaction creates the execution and moves it to RUNNING, so a
-- RUNNING request always has its execution.
--
-- The same statement writes the request's id into the job's args, which
-- River's fetch returns to the worker: the enqueue sends River's INSERT
-- before the request id is known, and an UPDATE of the new job's args in
-- the enqueue cost a second version of the row and of each of its index
-- entries, where the fetch writes a new version anyway.
--
-- A claimed request is held by its worker: the reapers fail it when that
-- worker dies before starting the run. When River holds the job again (the
-- worker snoozed it, fenced before it could start the run), nobody holds
-- it, and the next fetch claims it for its own worker.
CREATE INDEX job_request_river_job_idx ON job_request (river_job_id) WHERE river_job_id IS NOT NULL;

-- +goose StatementBegin
CREATE FUNCTION job_request_claim_on_fetch() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    request_id bigint;
BEGIN
    SELECT r.id INTO request_id FROM job_request r WHERE r.river_job_id = NEW.id;
    IF request_id IS NULL THEN
        RETURN NEW;
    END IF;
    -- The worker reads its request's id from the args River's fetch
    -- returns: the enqueue inserts the River job before the id is known.
    NEW.args := jsonb_set(NEW.args, '{request_id}', to_jsonb(request_id));
    UPDATE job_request
    SET claimed_at = now(), worker_id = NEW.attempted_by[cardinality(NEW.attempted_by)]
    WHERE id = request_id AND status = 'QUEUED';
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- radar_waits_for_fetch says whether a request claimed at its River job's
-- fetch is back in River's hands, not started (the worker snoozed the job:
-- fenced before it could start the run): nobody holds it, so the reapers
-- leave it to whoever fetches it next.
-- +goose StatementBegin
CREATE FUNCTION radar_waits_for_fetch(status text, river_job_id bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT status = 'QUEUED' AND EXISTS (
        SELECT 1 FROM river_job j
        WHERE j.id = river_job_id AND j.state IN ('available', 'pending', 'retryable', 'scheduled'))
$$;
-- +goose StatementEnd

CREATE TRIGGER job_request_claim_on_fetch
BEFORE UPDATE OF state ON river_job
FOR EACH ROW
WHEN (NEW.state = 'running' AND OLD.state IS DISTINCT FROM 'running' AND NEW.kind = 'buildrisk_run')
EXECUTE FUNCTION job_request_claim_on_fetch();

-- +goose Down
DROP TRIGGER job_request_claim_on_fetch ON river_job;
DROP FUNCTION radar_waits_for_fetch(text, bigint);
DROP FUNCTION job_request_claim_on_fetch();
DROP INDEX job_request_river_job_idx;

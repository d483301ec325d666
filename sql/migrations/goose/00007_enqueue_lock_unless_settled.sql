-- +goose Up
-- job_lock_unless_settled is the first step of an enqueue, sent in the
-- BEGIN batch before job_request_enqueue_state: it returns the job's active
-- request when the stale cleanup could not free it (held by a worker that
-- heartbeat within p_stale_seconds, so JobRequestListStale finds none, and,
-- while QUEUED, with a River job that will still run it, so
-- JobRequestListOrphaned finds none; River's job row is read as there; an
-- unknown (NULL) condition counts as unsettled), and otherwise takes the
-- job's advisory lock (AdvisoryXactLockJob's) and returns 0. A duplicate of a settled request is thus answered without
-- the lock, in the round trip an accepted request makes anyway, so a burst
-- of duplicates never queues on the lock the run's start takes.
-- p_stale_seconds <= 0 always takes the lock (no window to judge by). The
-- state read after it, in the same batch, then runs under the lock exactly
-- when the lock was taken.
-- +goose StatementBegin
CREATE FUNCTION job_lock_unless_settled(p_job text, p_stale_seconds float8)
RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    settled bigint;
BEGIN
    IF p_stale_seconds > 0 THEN
        SELECT r.id INTO settled
        FROM job_request r
        LEFT JOIN worker w ON w.id = r.worker_id
        LEFT JOIN river_job j ON j.id = r.river_job_id
        LEFT JOIN worker fw ON fw.id = j.attempted_by[array_length(j.attempted_by, 1)]
        WHERE r.job = p_job
          AND r.status IN ('QUEUED', 'RUNNING')
          AND (r.worker_id IS NULL OR w.heartbeat_at >= now() - make_interval(secs => p_stale_seconds)) IS TRUE
          AND (r.status = 'RUNNING' OR r.river_job_id IS NULL
               OR j.state IN ('available', 'scheduled', 'retryable', 'pending')
               OR (j.state = 'running' AND fw.heartbeat_at >= now() - make_interval(secs => p_stale_seconds))) IS TRUE
        LIMIT 1;
        IF settled IS NOT NULL THEN
            RETURN settled;
        END IF;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('buildrisk.job:' || p_job, 0));
    RETURN 0;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION job_lock_unless_settled(text, float8);

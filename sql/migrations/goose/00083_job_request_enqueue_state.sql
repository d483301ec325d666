-- +goose Up

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
-- lock is held.
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
    SELECT coalesce((SELECT r.id FROM job_request r WHERE r.job = p_job AND r.status IN ('QUEUED', 'RUNNING')), 0)::bigint,
           nextval(pg_get_serial_sequence('job_request', 'id'))::bigint,
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

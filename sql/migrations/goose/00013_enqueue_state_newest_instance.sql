-- +goose Up
-- job_request_enqueue_state as 00001 made it, but for how it finds the
-- job's newest instance: the job as a range ordered as
-- job_instance_job_id_idx (job, id DESC), as JobListSummary does, instead
-- of max(id) with job = p_job. PL/pgSQL keeps a generic plan of its query
-- for the session, planned for the average job; with one busy job in
-- history that plan walked job_instance's primary key backward past the
-- busy job's instances for every enqueue of a quiet job. Ordered as the
-- index, the probe of the index is the only plan.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION job_request_enqueue_state(p_job text)
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
        WHERE i.id = (SELECT ji.id FROM job_instance ji
                      WHERE ji.job >= p_job AND ji.job <= p_job
                      ORDER BY ji.job, ji.id DESC LIMIT 1)
        ORDER BY e.id DESC
        LIMIT 1
    ) AS last ON true;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION job_request_enqueue_state(p_job text)
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

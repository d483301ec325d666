-- +goose Up
-- execution_owned is the fence of every write of a run, in one place: true
-- while the execution e is active (STARTING, STARTED or STOPPING) under
-- worker p_worker_id and lease epoch p_lease_epoch, and that epoch is still
-- its instance's (JobInstanceTakeLease moves it when a later execution of
-- the instance starts, which fences off every earlier one). A fenced
-- statement filters its execution row with it and finds no row once the
-- run has lost its ownership (radar_owned then raises SQLSTATE BR001 where
-- the statement must fail). It takes the execution's row, not its id: a
-- fenced UPDATE that waited for the row (a reaper abandoning the execution
-- meanwhile) re-checks its WHERE clause against the row as committed
-- (READ COMMITTED), and the function then judges that row, not the one of
-- the statement's snapshot.
-- +goose StatementBegin
CREATE FUNCTION execution_owned(e job_execution, p_worker_id text, p_lease_epoch bigint)
RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN e.worker_id = p_worker_id
       AND e.lease_epoch = p_lease_epoch
       AND e.status IN ('STARTING', 'STARTED', 'STOPPING')
       AND e.lease_epoch = (SELECT i.lease_epoch FROM job_instance i WHERE i.id = e.instance_id);
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION execution_owned(job_execution, text, bigint);

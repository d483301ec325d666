-- name: JobInstanceInsert :one
INSERT INTO job_instance (job, params, params_hash, confirm_purge)
VALUES (@job, @params, @params_hash, @confirm_purge)
RETURNING *;

-- name: JobInstanceGetByID :one
SELECT * FROM job_instance WHERE id = @id;

-- name: JobInstanceExecutionTotals :one
-- JobInstanceExecutionTotals adds up the executions of an instance: how
-- many there were and the provider calls they made.
SELECT count(*)::integer AS executions,
       coalesce(sum(external_calls), 0)::bigint AS external_calls
FROM job_execution WHERE instance_id = @instance_id;

-- name: JobInstanceTakeLease :one
-- JobInstanceTakeLease gives a starting execution the instance's next lease
-- epoch; from then on, writes of any earlier execution of the instance find
-- the epoch moved and write nothing.
UPDATE job_instance SET lease_epoch = lease_epoch + 1 WHERE id = @id RETURNING lease_epoch;

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

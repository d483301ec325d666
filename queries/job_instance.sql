-- name: JobInstanceInsert :one
INSERT INTO job_instance (job, params, params_hash, confirm_purge)
VALUES (@job, @params, @params_hash, @confirm_purge)
RETURNING *;

-- name: JobInstanceGetByID :one
SELECT * FROM job_instance WHERE id = @id;

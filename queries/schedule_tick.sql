-- name: ScheduleTickStateByJob :many
-- ScheduleTickStateByJob returns, per job of jobs with a recorded due time,
-- the newest one and how many due times are deferred: what a scheduler
-- pass needs to decide whether there is anything to do. Each job's newest
-- due time is one probe of the primary key (job, due_at) and its deferred
-- ones a count over the partial schedule_tick_deferred_idx, so a pass
-- costs the same whatever the number of due times in history (a DISTINCT
-- ON over the whole table read every one of them).
SELECT n.job::text AS job, l.due_at AS last_due_at,
       (SELECT count(*) FROM schedule_tick d WHERE d.job = n.job AND d.outcome = 'deferred') AS deferred
FROM unnest(@jobs::text[]) AS n(job)
JOIN LATERAL (
    SELECT t.due_at FROM schedule_tick t WHERE t.job = n.job ORDER BY t.due_at DESC LIMIT 1
) l ON true;

-- name: JobScheduleSince :one
-- JobScheduleSince records that job has the schedule spec since since,
-- unless it already had that spec, and returns since when it has had it.
-- The conflicting row is always updated (to itself when the spec is the
-- same), so a pass racing another pass's first insert waits for that row
-- and returns it; reading it in a second statement would miss it (the
-- statement's snapshot predates the other pass's commit).
INSERT INTO job_schedule (job, spec, since) VALUES (@job, @spec, @since)
ON CONFLICT (job) DO UPDATE
SET since = CASE WHEN job_schedule.spec <> EXCLUDED.spec THEN EXCLUDED.since ELSE job_schedule.since END,
    updated_at = CASE WHEN job_schedule.spec <> EXCLUDED.spec THEN now() ELSE job_schedule.updated_at END,
    spec = EXCLUDED.spec
RETURNING since;

-- name: ScheduleTickGet :one
SELECT * FROM schedule_tick WHERE job = @job AND due_at = @due_at;

-- name: ScheduleTickInsert :one
-- ScheduleTickInsert records a due time; it returns no row when the due
-- time is already recorded (another scheduler got there first).
INSERT INTO schedule_tick (job, due_at, spec, outcome, params, params_hash, request_id, coalesced_into, message)
VALUES (@job, @due_at, @spec, @outcome, sqlc.narg('params'), @params_hash, sqlc.narg('request_id'), sqlc.narg('coalesced_into'), @message)
ON CONFLICT (job, due_at) DO NOTHING
RETURNING *;

-- name: ScheduleTickInsertMissed :execrows
-- ScheduleTickInsertMissed records due times older than the catch-up
-- window, skipping any already recorded.
INSERT INTO schedule_tick (job, due_at, spec, outcome, message)
SELECT @job, unnest(@due_ats::timestamptz[]), @spec, 'missed', @message
ON CONFLICT (job, due_at) DO NOTHING;

-- name: ScheduleTickOldestDeferred :one
SELECT * FROM schedule_tick
WHERE job = @job AND outcome = 'deferred'
ORDER BY due_at
LIMIT 1;

-- name: ScheduleTickDeferredByParams :one
SELECT * FROM schedule_tick
WHERE job = @job AND outcome = 'deferred' AND params_hash = @params_hash;

-- name: ScheduleTickResolve :exec
-- ScheduleTickResolve records what became of a deferred due time, and links
-- the due times coalesced into it to the same request.
WITH resolved AS (
    UPDATE schedule_tick t
    SET outcome = @outcome, request_id = sqlc.narg('request_id'), coalesced_into = sqlc.narg('coalesced_into'),
        message = @message, updated_at = now()
    WHERE t.job = @job AND t.due_at = @due_at AND t.outcome = 'deferred'
    RETURNING t.job, t.due_at
)
UPDATE schedule_tick c
SET request_id = sqlc.narg('request_id'), updated_at = now()
FROM resolved r
WHERE c.job = r.job AND c.coalesced_into = r.due_at AND c.outcome = 'coalesced';

-- name: ScheduleTickList :many
SELECT * FROM schedule_tick WHERE job = @job ORDER BY due_at;

-- name: JobFreshnessByJob :many
-- JobFreshnessByJob returns, per job of jobs, the end of its newest
-- COMPLETED execution, or, for a job that never completed, its first
-- recorded due time: the time since which a scheduled job is expected to
-- complete. A job with neither has no row. Every scrape of every process
-- reads it, so each job's figures are probes of an index, whatever the
-- history: job_execution_completed_idx (job, ended_at DESC), the job named
-- as a range ordered as the index (see JobListSummary), and the primary
-- key of schedule_tick (job, due_at). Grouping every execution and due
-- time, as it did, read both tables whole.
SELECT n.job::text AS job, coalesce(c.ended_at, f.due_at)::timestamptz AS since, (c.ended_at IS NOT NULL)::boolean AS completed
FROM unnest(@jobs::text[]) AS n(job)
LEFT JOIN LATERAL (
    SELECT e.ended_at FROM job_execution e
    WHERE e.job >= n.job AND e.job <= n.job AND e.status = 'COMPLETED' AND e.ended_at IS NOT NULL
    ORDER BY e.job, e.ended_at DESC LIMIT 1
) c ON true
LEFT JOIN LATERAL (
    SELECT t.due_at FROM schedule_tick t WHERE t.job = n.job ORDER BY t.due_at LIMIT 1
) f ON true
WHERE c.ended_at IS NOT NULL OR f.due_at IS NOT NULL;

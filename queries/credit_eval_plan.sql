-- name: CreditEvalPlanClear :exec
-- CreditEvalPlanClear deletes, before an execution plans, its own half-made
-- plan and the plans of executions that are no longer active: never the
-- plan of another execution still running (one that took this run's
-- instance over, say). It runs in the plan's fenced transaction
-- (batch.Run.Fenced), so a run that lost its execution deletes nothing.
DELETE FROM credit_eval_plan p
WHERE p.execution_id = @execution_id
   OR NOT EXISTS (
       SELECT 1 FROM job_execution e
       WHERE e.id = p.execution_id AND e.status IN ('STARTING', 'STARTED', 'STOPPING')
   );

-- name: CreditEvalPlanPage :one
-- CreditEvalPlanPage freezes the next chunk of an execution's plan: the
-- first chunk_size targets after the corp code `after` (keyset order), that
-- is companies with outstanding exposure or, for a backfill, those with no
-- grade for eval_date, without those inside the ranges of chunks the
-- instance already committed and those committed in a checkpoint part of a
-- chunk not committed. The committed ranges come as their first codes,
-- sorted, and the running maximum of their last codes: a code is inside one
-- when the greatest first code not above it (width_bucket, a binary search)
-- comes with a last code not below it. It returns the chunk's key
-- "FIRST-LAST" and its target count, and no row after the last target.
WITH page AS (
    SELECT e.corp_code
    FROM exposure e
    WHERE e.corp_code > @after::text
      AND e.outstanding_krw > 0
      AND (NOT @backfill::boolean
           OR NOT EXISTS (SELECT 1 FROM credit_grade g WHERE g.corp_code = e.corp_code AND g.eval_date = @eval_date::date))
      AND CASE WHEN cardinality(@done_firsts::text[]) = 0 THEN true
               ELSE NOT coalesce(e.corp_code <= (@done_lasts::text[])[width_bucket(e.corp_code, @done_firsts::text[])], false)
          END
      AND e.corp_code NOT IN (
          SELECT unnest(p.items) FROM job_checkpoint_part p
          WHERE p.instance_id = @instance_id AND p.chunk <> ALL (coalesce(@done_chunks::text[], ARRAY[]::text[]))
      )
    ORDER BY e.corp_code
    LIMIT @chunk_size::int
)
INSERT INTO credit_eval_plan (execution_id, chunk, corp_codes)
SELECT @execution_id::bigint, min(page.corp_code) || '-' || max(page.corp_code), array_agg(page.corp_code ORDER BY page.corp_code)
FROM page
HAVING count(*) > 0
RETURNING chunk, cardinality(corp_codes)::bigint AS targets;

-- name: CreditEvalPlanChunk :one
-- CreditEvalPlanChunk returns a chunk's targets in the execution's plan,
-- without those a checkpoint part of the chunk already committed (a chunk
-- done again after a transient error); no row when the chunk is not in the
-- plan.
SELECT ARRAY(
    SELECT code FROM unnest(pl.corp_codes) AS code
    WHERE code NOT IN (
        SELECT unnest(p.items) FROM job_checkpoint_part p
        WHERE p.instance_id = @instance_id AND p.chunk = pl.chunk
    )
    ORDER BY code
)::text[] AS corp_codes
FROM credit_eval_plan pl
WHERE pl.execution_id = @execution_id AND pl.chunk = @chunk;

-- name: CreditEvalPlanInKeyOrder :exec
-- CreditEvalPlanInKeyOrder makes the rest of the plan's transaction read
-- pages in index order whatever the statistics say. Right after a ledger
-- is loaded, exposure has none (autovacuum has not analyzed it yet, and the
-- application's roles may not ANALYZE a table they do not own): the planner
-- then guesses a few thousand targets, and CreditEvalPlanPage read every
-- target after its page and sorted them, for every page, so a plan took
-- time quadratic in the ledger.
SELECT set_config('enable_sort', 'off', true);

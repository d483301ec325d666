-- name: CreditEvalPlanClear :exec
-- CreditEvalPlanClear deletes the plans of earlier executions (and a
-- half-made one of this execution) before an execution plans.
DELETE FROM credit_eval_plan;

-- name: CreditEvalPlanFreeze :many
-- CreditEvalPlanFreeze writes an execution's plan in one statement: the
-- ledger's targets (every company with outstanding exposure or, for a
-- backfill, those with no grade for eval_date), without those inside the
-- corp code ranges of chunks the instance already committed and those
-- committed in a checkpoint part, in corp code order, cut into chunks of
-- chunk_size keyed "FIRST-LAST". It returns each chunk's key and target
-- count; the targets themselves stay in the database.
WITH done AS (
    SELECT split_part(c.chunk, '-', 1) AS first_code, split_part(c.chunk, '-', 2) AS last_code
    FROM job_checkpoint c
    WHERE c.instance_id = @instance_id
      AND c.chunk ~ '^[0-9]{8}-[0-9]{8}$'
      AND split_part(c.chunk, '-', 1) <= split_part(c.chunk, '-', 2)
), in_part AS (
    SELECT DISTINCT item FROM job_checkpoint_part p, unnest(p.items) AS item
    WHERE p.instance_id = @instance_id
), remaining AS (
    SELECT e.corp_code, (row_number() OVER (ORDER BY e.corp_code) - 1) / @chunk_size::int AS n
    FROM exposure e
    WHERE e.outstanding_krw > 0
      AND (NOT @backfill::boolean
           OR NOT EXISTS (SELECT 1 FROM credit_grade g WHERE g.corp_code = e.corp_code AND g.eval_date = @eval_date::date))
      AND NOT EXISTS (SELECT 1 FROM done d WHERE e.corp_code BETWEEN d.first_code AND d.last_code)
      AND NOT EXISTS (SELECT 1 FROM in_part i WHERE i.item = e.corp_code)
)
INSERT INTO credit_eval_plan (execution_id, chunk, corp_codes)
SELECT @execution_id::bigint, min(r.corp_code) || '-' || max(r.corp_code), array_agg(r.corp_code ORDER BY r.corp_code)
FROM remaining r
GROUP BY r.n
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

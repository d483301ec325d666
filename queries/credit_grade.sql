-- name: CreditGradeUpsert :execrows
-- CreditGradeUpsert writes one chunk's grades for eval_date in its
-- checkpoint transaction: a company evaluated again the same day (a resume
-- after kill -9, a backfill) replaces its row, never adds one.
INSERT INTO credit_grade (corp_code, eval_date, grade, outlook, source, execution_id, updated_at)
SELECT g.corp_code, @eval_date::date, g.grade, nullif(g.outlook, ''), g.source, @execution_id::bigint, now()
FROM (SELECT unnest(@corp_codes::text[]) AS corp_code, unnest(@grades::text[]) AS grade,
             unnest(@outlooks::text[]) AS outlook, unnest(@sources::text[]) AS source) AS g
ON CONFLICT (corp_code, eval_date) DO UPDATE
SET grade = excluded.grade, outlook = excluded.outlook, source = excluded.source,
    execution_id = excluded.execution_id, updated_at = now();

-- name: CreditGradeCountByExecutions :one
-- CreditGradeCountByExecutions counts the rows the executions wrote (and
-- that no later run has overwritten): the domain-row side of the two-way
-- count.
SELECT count(*) FROM credit_grade WHERE execution_id = ANY(@execution_ids::bigint[]);

-- name: CreditGradeAsOf :one
-- CreditGradeAsOf returns a company's newest grade evaluated on or before
-- as_of (metrics: the latest grade, and the grade in force at the start of
-- its window).
SELECT eval_date, grade FROM credit_grade
WHERE corp_code = @corp_code AND eval_date <= @as_of::date
ORDER BY eval_date DESC
LIMIT 1;

-- name: CreditGradeOldestInRange :one
-- CreditGradeOldestInRange returns a company's oldest grade evaluated from
-- from_date through to_date.
SELECT eval_date, grade FROM credit_grade
WHERE corp_code = @corp_code AND eval_date BETWEEN @from_date::date AND @to_date::date
ORDER BY eval_date
LIMIT 1;

-- name: ExposureUpsert :execrows
-- ExposureUpsert loads ledger lines idempotently (radar import exposure,
-- radar dev): a company listed again takes the new amount.
INSERT INTO exposure (corp_code, outstanding_krw, updated_at)
SELECT unnest(@corp_codes::text[]), unnest(@outstanding_krws::bigint[]), now()
ON CONFLICT (corp_code) DO UPDATE
SET outstanding_krw = excluded.outstanding_krw, updated_at = now();

-- name: ExposureCount :one
SELECT count(*) FROM exposure;

-- name: ExposureTargets :many
-- ExposureTargets lists creditEval's targets: every company with an
-- outstanding exposure, in corp code order (the order chunks are cut in).
SELECT corp_code FROM exposure WHERE outstanding_krw > 0 ORDER BY corp_code;

-- name: ExposureTargetsWithoutGrade :many
-- ExposureTargetsWithoutGrade lists the targets with no credit grade for
-- eval_date: what a backfill re-evaluates.
SELECT e.corp_code FROM exposure e
WHERE e.outstanding_krw > 0
  AND NOT EXISTS (SELECT 1 FROM credit_grade g WHERE g.corp_code = e.corp_code AND g.eval_date = @eval_date::date)
ORDER BY e.corp_code;

-- name: ExposureTargetCount :one
SELECT count(*) FROM exposure WHERE outstanding_krw > 0;

-- name: ExposureTargetCountWithoutGrade :one
SELECT count(*) FROM exposure e
WHERE e.outstanding_krw > 0
  AND NOT EXISTS (SELECT 1 FROM credit_grade g WHERE g.corp_code = e.corp_code AND g.eval_date = @eval_date::date);

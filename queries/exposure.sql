-- name: ExposureUpsert :execrows
-- ExposureUpsert loads ledger lines idempotently (radar import exposure,
-- radar dev): a company listed again takes the new amount.
INSERT INTO exposure (corp_code, outstanding_krw, updated_at)
SELECT unnest(@corp_codes::text[]), unnest(@outstanding_krws::bigint[]), now()
ON CONFLICT (corp_code) DO UPDATE
SET outstanding_krw = excluded.outstanding_krw, updated_at = now();

-- name: ExposureCount :one
SELECT count(*) FROM exposure;

-- name: ExposureTargetCount :one
SELECT count(*) FROM exposure WHERE outstanding_krw > 0;

-- name: ExposureTargetCountWithoutGrade :one
SELECT count(*) FROM exposure e
WHERE e.outstanding_krw > 0
  AND NOT EXISTS (SELECT 1 FROM credit_grade g WHERE g.corp_code = e.corp_code AND g.eval_date = @eval_date::date);

-- name: ExposureImportStage :copyfrom
-- ExposureImportStage copies a batch of ledger lines into the import's
-- staging rows; a bad line carries its reason and no values.
INSERT INTO exposure_import (import_id, line, corp_code, outstanding_krw, reason)
VALUES (@import_id, @line, @corp_code, @outstanding_krw, @reason);

-- name: ExposureImportBadLines :many
-- ExposureImportBadLines lists the import's bad lines in line order: the
-- ones staged with a reason, and every repeat of a company after its first
-- line (two amounts for one company is a mistake to fix, not to guess).
SELECT b.line, b.reason::text AS reason FROM (
    SELECT s.line, s.reason FROM exposure_import s
    WHERE s.import_id = @import_id AND s.reason IS NOT NULL
    UNION ALL
    SELECT d.line, 'corp_code ' || d.corp_code || ' is already on line ' || d.first_line
    FROM (
        SELECT s.line, s.corp_code, min(s.line) OVER (PARTITION BY s.corp_code) AS first_line
        FROM exposure_import s
        WHERE s.import_id = @import_id AND s.reason IS NULL
    ) d
    WHERE d.line <> d.first_line
) b
ORDER BY b.line;

-- name: ExposureImportApply :execrows
-- ExposureImportApply upserts the import's good lines, each company from its
-- first line.
INSERT INTO exposure (corp_code, outstanding_krw, updated_at)
SELECT DISTINCT ON (s.corp_code) s.corp_code, s.outstanding_krw, now()
FROM exposure_import s
WHERE s.import_id = @import_id AND s.reason IS NULL
ORDER BY s.corp_code, s.line
ON CONFLICT (corp_code) DO UPDATE
SET outstanding_krw = excluded.outstanding_krw, updated_at = now();

-- name: ExposureImportClear :exec
DELETE FROM exposure_import WHERE import_id = @import_id;

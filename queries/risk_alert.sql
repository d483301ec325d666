-- name: RiskAlertDeleteByCorpDate :execrows
-- RiskAlertDeleteByCorpDate removes a company's alerts of a date, so that a
-- re-run replaces them (in the same transaction as the new ones).
DELETE FROM risk_alert WHERE corp_code = @corp_code AND alert_date = @alert_date;

-- name: RiskAlertInsert :exec
INSERT INTO risk_alert (corp_code, alert_date, rule, severity, "values", execution_id)
VALUES (@corp_code, @alert_date, @rule, @severity, @values, @execution_id);

-- name: RiskAlertCorpCodesByDate :many
SELECT DISTINCT corp_code FROM risk_alert WHERE alert_date = @alert_date ORDER BY corp_code;

-- name: RiskAlertCountByExecutions :one
SELECT count(*) FROM risk_alert WHERE execution_id = ANY(@execution_ids::bigint[]);

-- name: RiskAlertLatestDate :one
-- RiskAlertLatestDate returns the newest alert date, of one company when
-- corp_code is given (no row when there is none).
SELECT alert_date FROM risk_alert
WHERE sqlc.narg(corp_code)::text IS NULL OR corp_code = sqlc.narg(corp_code)::text
ORDER BY alert_date DESC
LIMIT 1;

-- name: RiskAlertList :many
-- RiskAlertList lists the alerts of a date, of one company when corp_code is
-- given, most severe first.
SELECT a.id, a.corp_code, coalesce(c.name, '')::text AS company_name, a.alert_date, a.rule, a.severity,
       a."values", a.execution_id, a.created_at
FROM risk_alert a
LEFT JOIN company c ON c.corp_code = a.corp_code
WHERE a.alert_date = @alert_date
  AND (sqlc.narg(corp_code)::text IS NULL OR a.corp_code = sqlc.narg(corp_code)::text)
ORDER BY CASE a.severity WHEN 'critical' THEN 0 WHEN 'high' THEN 1 WHEN 'medium' THEN 2 ELSE 3 END,
         a.corp_code, a.rule;

-- name: RiskRuleCheckUpsert :exec
-- RiskRuleCheckUpsert marks a company's metrics of alert_date as evaluated
-- by rules, in the chunk's transaction with its alerts.
INSERT INTO risk_rule_check (alert_date, corp_code, execution_id, checked_at)
VALUES (@alert_date::date, @corp_code::text, @execution_id::bigint, now())
ON CONFLICT (alert_date, corp_code) DO UPDATE
SET execution_id = excluded.execution_id, checked_at = now();

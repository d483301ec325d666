-- name: RiskMetricUpsert :exec
-- RiskMetricUpsert stores one company's metrics on one date; a re-run of the
-- date replaces them.
INSERT INTO risk_metric (corp_code, metric_date, drawdown_20d, risk_filings_90d, grade_change_notches,
                         apt_volume_change, apt_price_change, execution_id, updated_at)
VALUES (@corp_code, @metric_date, sqlc.narg(drawdown_20d)::float8, @risk_filings_90d,
        sqlc.narg(grade_change_notches)::integer, sqlc.narg(apt_volume_change)::float8,
        sqlc.narg(apt_price_change)::float8, @execution_id, now())
ON CONFLICT (corp_code, metric_date) DO UPDATE
SET drawdown_20d = excluded.drawdown_20d, risk_filings_90d = excluded.risk_filings_90d,
    grade_change_notches = excluded.grade_change_notches, apt_volume_change = excluded.apt_volume_change,
    apt_price_change = excluded.apt_price_change, execution_id = excluded.execution_id, updated_at = now();

-- name: RiskMetricGet :one
SELECT corp_code, metric_date, drawdown_20d, risk_filings_90d, grade_change_notches,
       apt_volume_change, apt_price_change
FROM risk_metric WHERE corp_code = @corp_code AND metric_date = @metric_date;

-- name: RiskMetricCorpCodesByDate :many
SELECT corp_code FROM risk_metric WHERE metric_date = @metric_date ORDER BY corp_code;

-- name: RiskMetricCountByExecutions :one
SELECT count(*) FROM risk_metric WHERE execution_id = ANY(@execution_ids::bigint[]);

-- Coverage: per job, its targets for a data date (from the job's source of
-- truth) and how many of them are current (have the job's row for that
-- date), counted from the domain tables alone. The definitions are
-- documented beside each job (jobs.Coverage in jobs/<pkg>/spec.go), whose
-- Count and Missing run its two queries here. Every count is one merge join of
-- two indexes in key order (00008_coverage.sql), and every missing list a
-- keyset page after the cursor.

-- name: CoverageCreditEvalCount :one
-- CoverageCreditEvalCount: targets are the companies with outstanding
-- exposure; current, those with a grade for data_date (the eval date).
SELECT count(*) AS targets, count(g.corp_code) AS current
FROM exposure e
LEFT JOIN credit_grade g ON g.eval_date = @data_date::date AND g.corp_code = e.corp_code
WHERE e.outstanding_krw > 0;

-- name: CoverageCreditEvalMissing :many
-- CoverageCreditEvalMissing lists the targets without a grade for
-- data_date after the corp code `after`, in corp-code order. Like every
-- Missing query here, it looks for the day's row with a scalar subquery
-- (one probe of the table's key per target, at most one row), not NOT
-- EXISTS: the planner may turn an anti-join into a scan of the whole
-- per-day table, and did so or not from one ANALYZE sample to the next.
SELECT e.corp_code::text AS target
FROM exposure e
WHERE e.outstanding_krw > 0 AND e.corp_code > @after::text
  AND (SELECT true FROM credit_grade g WHERE g.eval_date = @data_date::date AND g.corp_code = e.corp_code) IS NULL
ORDER BY e.corp_code
LIMIT @row_limit::int;

-- name: CoverageStockPriceCount :one
-- CoverageStockPriceCount: targets are the listed tracked companies;
-- current, those with a price for data_date (the trading date).
SELECT count(*) AS targets, count(p.short_code) AS current
FROM company c
LEFT JOIN stock_price p ON p.trade_date = @data_date::date AND p.short_code = c.stock_code
WHERE c.tracked AND c.stock_code IS NOT NULL;

-- name: CoverageStockPriceMissing :many
-- CoverageStockPriceMissing lists the stock codes of the targets without a
-- price for data_date after `after`, in stock-code order.
SELECT c.stock_code::text AS target
FROM company c
WHERE c.tracked AND c.stock_code IS NOT NULL AND c.stock_code > @after::text
  AND (SELECT true FROM stock_price p WHERE p.trade_date = @data_date::date AND p.short_code = c.stock_code) IS NULL
ORDER BY c.stock_code
LIMIT @row_limit::int;

-- name: CoverageMetricsCount :one
-- CoverageMetricsCount: targets are the tracked companies; current, those
-- with metrics for data_date.
SELECT count(*) AS targets, count(m.corp_code) AS current
FROM company c
LEFT JOIN risk_metric m ON m.metric_date = @data_date::date AND m.corp_code = c.corp_code
WHERE c.tracked;

-- name: CoverageMetricsMissing :many
-- CoverageMetricsMissing lists the tracked companies without metrics for
-- data_date after `after`, in corp-code order.
SELECT c.corp_code::text AS target
FROM company c
WHERE c.tracked AND c.corp_code > @after::text
  AND (SELECT true FROM risk_metric m WHERE m.metric_date = @data_date::date AND m.corp_code = c.corp_code) IS NULL
ORDER BY c.corp_code
LIMIT @row_limit::int;

-- name: CoverageRulesCount :one
-- CoverageRulesCount: targets are the companies with metrics for
-- data_date (what rules evaluates); current, those rules checked for that
-- date (risk_rule_check), whether or not a rule fired.
SELECT count(*) AS targets, count(k.corp_code) AS current
FROM risk_metric m
LEFT JOIN risk_rule_check k ON k.alert_date = @data_date::date AND k.corp_code = m.corp_code
WHERE m.metric_date = @data_date::date;

-- name: CoverageRulesMissing :many
-- CoverageRulesMissing lists the companies with metrics for data_date that
-- rules has not checked for it, after `after`, in corp-code order.
SELECT m.corp_code::text AS target
FROM risk_metric m
WHERE m.metric_date = @data_date::date AND m.corp_code > @after::text
  AND (SELECT true FROM risk_rule_check k WHERE k.alert_date = @data_date::date AND k.corp_code = m.corp_code) IS NULL
ORDER BY m.corp_code
LIMIT @row_limit::int;

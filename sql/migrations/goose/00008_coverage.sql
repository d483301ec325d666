-- +goose Up

-- Coverage (jobs/coverage): per job, the targets its source of truth names
-- for a data date and how many of them have a current row, counted from the
-- domain tables alone every 30 s by the api and every worker. The indexes
-- let each count walk two indexes in corp-code order (a merge join, index
-- only) instead of sorting or hashing a million rows; risk_rule_check is the
-- marker rules had no row for.

-- creditEval: the targets (outstanding exposure) in corp-code order...
CREATE INDEX exposure_target_idx ON exposure (corp_code) WHERE outstanding_krw > 0;
-- ...against the day's grades in the same order.
CREATE INDEX credit_grade_eval_date_idx ON credit_grade (eval_date, corp_code);

-- stockPrice: the listed tracked companies by stock code against the
-- trading date's prices.
CREATE INDEX company_tracked_listed_idx ON company (stock_code) WHERE tracked AND stock_code IS NOT NULL;
CREATE INDEX stock_price_trade_date_idx ON stock_price (trade_date, short_code);

-- metrics: the tracked companies (company_tracked_idx) against the date's
-- metrics in corp-code order.
CREATE INDEX risk_metric_date_corp_idx ON risk_metric (metric_date, corp_code);

-- risk_rule_check marks a company whose metrics of alert_date rules
-- evaluated, whether or not a rule fired: risk_alert holds only the rules
-- that fired, so without it "evaluated, nothing fired" and "never
-- evaluated" look the same. Written in the chunk's transaction with the
-- company's alerts.
CREATE TABLE risk_rule_check (
    alert_date   date        NOT NULL,
    corp_code    text        NOT NULL,
    execution_id bigint      NOT NULL,
    checked_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (alert_date, corp_code)
);

-- +goose Down
DROP TABLE risk_rule_check;
DROP INDEX risk_metric_date_corp_idx;
DROP INDEX stock_price_trade_date_idx;
DROP INDEX company_tracked_listed_idx;
DROP INDEX credit_grade_eval_date_idx;
DROP INDEX exposure_target_idx;

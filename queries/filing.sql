-- name: FilingUpsert :execrows
-- FilingUpsert writes one company's filings idempotently: a filing listed
-- twice (or by a later run) is one row, its risk flag recomputed.
INSERT INTO filing (rcept_no, corp_code, corp_name, report_nm, rcept_dt, flr_nm, rm, risk_flag, risk_reason, execution_id, updated_at)
SELECT unnest(@rcept_nos::text[]), unnest(@corp_codes::text[]), unnest(@corp_names::text[]),
       unnest(@report_nms::text[]), unnest(@rcept_dts::date[]), unnest(@flr_nms::text[]),
       unnest(@rms::text[]), unnest(@risk_flags::boolean[]), unnest(@risk_reasons::text[]),
       @execution_id, now()
ON CONFLICT (rcept_no) DO UPDATE
SET corp_code = excluded.corp_code, corp_name = excluded.corp_name, report_nm = excluded.report_nm,
    rcept_dt = excluded.rcept_dt, flr_nm = excluded.flr_nm, rm = excluded.rm,
    risk_flag = excluded.risk_flag, risk_reason = excluded.risk_reason,
    execution_id = excluded.execution_id, updated_at = now();

-- name: FilingCountByExecutions :one
SELECT count(*) FROM filing WHERE execution_id = ANY(@execution_ids::bigint[]);

-- name: FilingRiskCount :one
-- FilingRiskCount counts a company's risk-flagged filings received from
-- from_date through to_date.
SELECT count(*) FROM filing
WHERE corp_code = @corp_code AND risk_flag AND rcept_dt BETWEEN @from_date::date AND @to_date::date;

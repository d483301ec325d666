-- name: CompanyUpsert :execrows
-- CompanyUpsert writes one chunk of the corp-code archive idempotently: a
-- company loaded twice is one row. An empty stock code or modify date is
-- stored as NULL.
INSERT INTO company (corp_code, name, eng_name, stock_code, modify_date, tracked, execution_id, updated_at)
SELECT unnest(@corp_codes::text[]), unnest(@names::text[]), unnest(@eng_names::text[]),
       NULLIF(unnest(@stock_codes::text[]), ''), NULLIF(unnest(@modify_dates::text[]), '')::date,
       unnest(@tracked::boolean[]), @execution_id, now()
ON CONFLICT (corp_code) DO UPDATE
SET name = excluded.name, eng_name = excluded.eng_name, stock_code = excluded.stock_code,
    modify_date = excluded.modify_date, tracked = excluded.tracked,
    execution_id = excluded.execution_id, updated_at = now();

-- name: CompanyCount :one
SELECT count(*) FROM company;

-- name: CompanyCountByExecutions :one
SELECT count(*) FROM company WHERE execution_id = ANY(@execution_ids::bigint[]);

-- name: CompanyTrackedList :many
-- CompanyTrackedList returns the tracked companies in corp-code order.
SELECT corp_code, name, stock_code FROM company WHERE tracked ORDER BY corp_code;

-- name: CompanyTrackedCount :one
SELECT count(*) FROM company WHERE tracked;

-- name: CompanyTrackedListedList :many
-- CompanyTrackedListedList returns the listed tracked companies in stock-code
-- order.
SELECT corp_code, name, stock_code::text AS stock_code
FROM company WHERE tracked AND stock_code IS NOT NULL ORDER BY stock_code;

-- name: CompanyTrackedListedCount :one
SELECT count(*) FROM company WHERE tracked AND stock_code IS NOT NULL;

-- name: CompanyTrackedListedRange :many
-- CompanyTrackedListedRange returns the listed tracked companies whose stock
-- code is in [first_code, last_code], in stock-code order.
SELECT corp_code, name, stock_code::text AS stock_code
FROM company
WHERE tracked AND stock_code IS NOT NULL AND stock_code BETWEEN @first_code::text AND @last_code::text
ORDER BY stock_code;

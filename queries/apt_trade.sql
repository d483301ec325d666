-- name: AptTradeUpsert :execrows
-- AptTradeUpsert writes one page of trades idempotently: the same trade
-- fetched twice is one row.
INSERT INTO apt_trade (region, deal_ym, serial, apt_name, dong, deal_date, deal_amount_krw, area_m2, floor, build_year, execution_id, updated_at)
SELECT unnest(@regions::text[]), unnest(@deal_yms::text[]), unnest(@serials::text[]), unnest(@apt_names::text[]),
       unnest(@dongs::text[]), unnest(@deal_dates::date[]), unnest(@amounts::bigint[]), unnest(@areas::numeric[]),
       unnest(@floors::integer[]), unnest(@build_years::integer[]), @execution_id, now()
ON CONFLICT (region, deal_ym, serial) DO UPDATE
SET apt_name = excluded.apt_name, dong = excluded.dong, deal_date = excluded.deal_date,
    deal_amount_krw = excluded.deal_amount_krw, area_m2 = excluded.area_m2, floor = excluded.floor,
    build_year = excluded.build_year, execution_id = excluded.execution_id, updated_at = now();

-- name: AptTradeCountByExecutions :one
SELECT count(*) FROM apt_trade WHERE execution_id = ANY(@execution_ids::bigint[]);

-- name: AptTradeCountByRegionMonth :one
SELECT count(*) FROM apt_trade WHERE region = @region AND deal_ym = @deal_ym;

-- name: AptTradeStatsByRegions :one
-- AptTradeStatsByRegions counts the trades in regions dealt from from_date
-- through to_date and their median price per m² (0 without trades); the
-- metrics job compares two such windows.
SELECT count(*)::bigint AS trades,
       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY (deal_amount_krw / area_m2)::float8), 0)::float8 AS median_price_per_m2
FROM apt_trade
WHERE region = ANY(@regions::text[]) AND deal_date BETWEEN @from_date::date AND @to_date::date;

-- name: StockPriceUpsert :execrows
-- StockPriceUpsert writes one chunk's prices idempotently.
INSERT INTO stock_price (short_code, trade_date, corp_code, close, open, high, low, volume, market_cap, execution_id, updated_at)
SELECT unnest(@short_codes::text[]), unnest(@trade_dates::date[]), unnest(@corp_codes::text[]),
       unnest(@closes::bigint[]), unnest(@opens::bigint[]), unnest(@highs::bigint[]), unnest(@lows::bigint[]),
       unnest(@volumes::bigint[]), unnest(@market_caps::bigint[]), @execution_id, now()
ON CONFLICT (short_code, trade_date) DO UPDATE
SET corp_code = excluded.corp_code, close = excluded.close, open = excluded.open, high = excluded.high,
    low = excluded.low, volume = excluded.volume, market_cap = excluded.market_cap,
    execution_id = excluded.execution_id, updated_at = now();

-- name: StockPriceCountByExecutions :one
SELECT count(*) FROM stock_price WHERE execution_id = ANY(@execution_ids::bigint[]);

-- name: StockPriceRecentByCorp :many
-- StockPriceRecentByCorp returns a company's last max_rows closes on or
-- before as_of, newest first.
SELECT trade_date, close FROM stock_price
WHERE corp_code = @corp_code AND trade_date <= @as_of::date
ORDER BY trade_date DESC
LIMIT @max_rows;

-- name: StockPriceShortCodesInRange :many
-- StockPriceShortCodesInRange returns the stock codes in [first_code,
-- last_code] with a price for trade_date (stockPrice onlyMissing leaves
-- them out of a chunk).
SELECT short_code FROM stock_price
WHERE trade_date = @trade_date::date AND short_code BETWEEN @first_code::text AND @last_code::text
ORDER BY short_code;

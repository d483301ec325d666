// Package stockprice is the stockPrice job: one trading day's prices (KRX)
// of the listed tracked companies, in chunks of ChunkSize
// companies with one call each on the bounded fan-out pool, upserted
// idempotently into stock_price.
//
// Each price is committed as soon as it comes back (batch.FanOutCommit), so
// a chunk that ends early keeps the prices already paid for.
//
// A day without trading is not a failure: on a weekend nothing is called
// and every company is skipped; on a holiday KRX answers every company with
// no items and they are skipped. The reason is logged once per chunk.
package stockprice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/upstream"
)

// ErrNoCompanies fails a run before any listed company is tracked.
var ErrNoCompanies = errors.New("no listed tracked companies: run corpCodeSync first")

// Job implements batch.Job for stockPrice.
type Job struct{}

var _ batch.Job = (*Job)(nil)
var _ batch.DomainRowCounter = (*Job)(nil)

// Plan implements batch.Job: the listed tracked companies in stock-code
// order, in chunks keyed FIRST-LAST (their first and last stock codes), so
// a resume skips exactly the ranges already committed.
func (Job) Plan(ctx context.Context, run *batch.Run) (*batch.Plan, error) {
	p, err := decode(run.Params)
	if err != nil {
		return nil, err
	}
	rows, err := queries.New().CompanyTrackedListedList(ctx, run.DB)
	if err != nil {
		return nil, fmt.Errorf("error listing listed tracked companies: %w", err)
	}
	if len(rows) == 0 {
		return nil, ErrNoCompanies
	}
	codes := make([]string, len(rows))
	for i, r := range rows {
		codes[i] = r.StockCode
	}
	if p.OnlyMissing {
		// Coverage's own definition of the missing targets, for the date.
		codes, err = batch.AllPages(func(after string, limit int32) ([]string, error) {
			return queries.New().CoverageStockPriceMissing(ctx, run.DB, &queries.CoverageStockPriceMissingParams{After: after, DataDate: p.Day(), RowLimit: limit})
		})
		if err != nil {
			return nil, fmt.Errorf("error listing the companies without a price: %w", err)
		}
	}
	var chunks []string
	for i := 0; i < len(codes); i += ChunkSize {
		last := min(i+ChunkSize, len(codes)) - 1
		chunks = append(chunks, codes[i]+"-"+codes[last])
	}
	return &batch.Plan{Chunks: chunks, Targets: batch.TargetsUnknown}, nil
}

// price is one company's outcome.
type price struct {
	corpCode string
	price    *upstream.StockPrice // nil: no trading that day
	bad      error                // an answer that could not be used
}

// Process implements batch.Job: one call per company of the chunk, on the
// fan-out pool. An item is one company: written with its price, skipped
// when KRX reports no trading that day, failed when its answer is
// unusable. Each price is committed as soon as it comes back (a checkpoint
// part, batch.FanOutCommit), so a call that fails after the client's
// retries (or hits a cap), a stop or a drain ends the chunk with the prices
// already paid for kept; a resume calls only the companies without one.
// The chunk's own checkpoint accounts for the skipped and failed companies.
func (Job) Process(ctx context.Context, run *batch.Run, chunk string) (*batch.ChunkResult, error) {
	p, err := decode(run.Params)
	if err != nil {
		return nil, err
	}
	first, last, ok := strings.Cut(chunk, "-")
	if !ok {
		return nil, fmt.Errorf("malformed chunk key %q", chunk)
	}
	listed, err := queries.New().CompanyTrackedListedRange(ctx, run.DB, &queries.CompanyTrackedListedRangeParams{FirstCode: first, LastCode: last})
	if err != nil {
		return nil, fmt.Errorf("error listing the chunk's companies: %w", err)
	}
	committed, err := batch.CommittedItems(ctx, run)
	if err != nil {
		return nil, err
	}
	priced := map[string]bool{}
	if p.OnlyMissing {
		codes, err := queries.New().StockPriceShortCodesInRange(ctx, run.DB, &queries.StockPriceShortCodesInRangeParams{TradeDate: p.Day(), FirstCode: first, LastCode: last})
		if err != nil {
			return nil, fmt.Errorf("error listing the chunk's prices: %w", err)
		}
		for _, c := range codes {
			priced[c] = true
		}
	}
	companies := slices.DeleteFunc(listed, func(c *queries.CompanyTrackedListedRangeRow) bool {
		return committed[c.CorpCode] || priced[c.StockCode]
	})
	res := &batch.ChunkResult{Targets: int64(len(companies))}
	if p.Weekend() {
		res.Skipped = res.Targets
		res.SkipReason = "weekend"
		run.Logger.InfoContext(ctx, "stock prices skipped", slog.String("chunk", chunk), slog.Int64("skipped", res.Skipped),
			slog.String("reason", fmt.Sprintf("%s is a %s: KRX does not trade", p.Date, p.Day().Weekday())))
		return res, nil
	}

	day := p.Day()
	results, err := batch.FanOutCommit(ctx, run, chunk, companies, func(ctx context.Context, c *queries.CompanyTrackedListedRangeRow) (price, error) {
		body, err := run.Calls.Get(ctx, upstream.EndpointStockPrice, upstream.StockPriceQuery(c.StockCode, day))
		if err != nil {
			return price{}, batch.Halt(err)
		}
		out := price{corpCode: c.CorpCode}
		prices, err := upstream.ParseStockPrice(body)
		if err != nil {
			var apiErr *upstream.APIError
			if errors.As(err, &apiErr) {
				return price{}, batch.Halt(err) // a refusal (key, quota): every further call would get it too
			}
			out.bad = err
			return out, nil
		}
		for i := range prices {
			if prices[i].ShortCode == c.StockCode && prices[i].Date.Equal(day) {
				out.price = &prices[i]
			}
		}
		return out, nil
	}, batch.Committer[*queries.CompanyTrackedListedRangeRow, price]{
		Key:   func(c *queries.CompanyTrackedListedRangeRow) string { return c.CorpCode },
		Queue: func(b *pgx.Batch, prices []price) { queueUpsert(ctx, b, run.ExecutionID, prices) },
		Keep:  func(v price) bool { return v.bad == nil && v.price != nil },
	})
	if err != nil {
		return nil, err
	}

	var firstBad error
	written := 0
	for _, r := range results {
		switch v := r.Value; {
		case r.Err != nil: // a panic: recorded by the pool, counted here
			res.Failed++
			firstBad = cmpErr(firstBad, r.Err)
		case v.bad != nil:
			res.Failed++
			firstBad = cmpErr(firstBad, v.bad)
		case v.price == nil:
			res.Skipped++
			res.SkipReason = "no price for the day (holiday or not traded)"
		case r.Committed:
			res.Targets-- // accounted for by its checkpoint part
			written++
		default:
			// FanOutCommit returns an error when a kept value did not commit.
			return nil, fmt.Errorf("the price of %s was not committed", v.corpCode)
		}
	}
	if res.Skipped > 0 {
		reason := "KRX reports no trading for these stocks that day (suspended or not yet traded)"
		if written == 0 && res.Failed == 0 {
			reason = fmt.Sprintf("KRX reports no trading on %s (a holiday)", p.Date)
		}
		run.Logger.InfoContext(ctx, "stock prices skipped", slog.String("chunk", chunk), slog.Int64("skipped", res.Skipped), slog.String("reason", reason))
	}
	if res.Failed > 0 {
		run.Logger.WarnContext(ctx, "stock prices failed", slog.String("chunk", chunk), slog.Int64("failed", res.Failed), slog.String("first_error", firstBad.Error()))
	}
	return res, nil
}

// queueUpsert queues the upsert of one part's prices on the part's batch.
func queueUpsert(ctx context.Context, b *pgx.Batch, executionID int64, prices []price) {
	q := &queries.StockPriceUpsertParams{ExecutionID: executionID}
	for _, v := range prices {
		q.ShortCodes = append(q.ShortCodes, v.price.ShortCode)
		q.TradeDates = append(q.TradeDates, v.price.Date)
		q.CorpCodes = append(q.CorpCodes, v.corpCode)
		q.Closes = append(q.Closes, v.price.Close)
		q.Opens = append(q.Opens, v.price.Open)
		q.Highs = append(q.Highs, v.price.High)
		q.Lows = append(q.Lows, v.price.Low)
		q.Volumes = append(q.Volumes, v.price.Volume)
		q.MarketCaps = append(q.MarketCaps, v.price.MarketCap)
	}
	queries.Queue(b, func(db queries.DBTX) { _, _ = queries.New().StockPriceUpsert(ctx, db, q) }).
		Exec(func(tag pgconn.CommandTag) error {
			if n := tag.RowsAffected(); n != int64(len(prices)) {
				return fmt.Errorf("upserted %d stock prices, expected %d", n, len(prices))
			}
			return nil
		})
}

// DomainRows implements batch.DomainRowCounter.
func (Job) DomainRows(ctx context.Context, db queries.DBTX, executionIDs []int64) (int64, error) {
	return queries.New().StockPriceCountByExecutions(ctx, db, executionIDs)
}

// Estimate is stockPrice's call estimate for the api (request.EstimateFunc):
// one call per listed tracked company (with onlyMissing, per one without a
// price for the date), none on a weekend.
func Estimate(ctx context.Context, db queries.DBTX, params *catalog.Params) (int, error) {
	p := params.Value.(*Params)
	if p.Weekend() {
		return 0, nil
	}
	if p.OnlyMissing {
		c, err := queries.New().CoverageStockPriceCount(ctx, db, p.Day())
		if err != nil {
			return 0, fmt.Errorf("error counting the companies without a price: %w", err)
		}
		return int(c.Targets - c.Current), nil
	}
	n, err := queries.New().CompanyTrackedListedCount(ctx, db)
	if err != nil {
		return 0, fmt.Errorf("error counting listed tracked companies: %w", err)
	}
	return int(n), nil
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func decode(raw json.RawMessage) (*Params, error) {
	return Spec().Params(raw)
}

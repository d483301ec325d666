package stockprice

import (
	"context"
	"time"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
)

// Name is the name of the KRX daily price job.
const Name = "stockPrice"

// ChunkSize is how many listed companies one chunk prices.
const ChunkSize = 100

// Params are stockPrice's params. The API names their schema
// StockPriceParams, after the job.
type Params struct {
	Date string `json:"date" doc:"trading date, YYYY-MM-DD, from 2006 to the end of next year; weekends and holidays are skipped, not failed" pattern:"^[0-9]{4}-[0-9]{2}-[0-9]{2}$" example:"2025-03-14"`
	// OnlyMissing prices only the listed tracked companies without a price
	// for Date (coverage's missing targets).
	OnlyMissing bool `json:"onlyMissing,omitempty" doc:"price only the listed tracked companies without a price for the date (/v1/coverage's missing targets)" example:"false"`
}

// Day returns Date as a date. Only valid params.
func (p *Params) Day() time.Time {
	d, _ := time.Parse(time.DateOnly, p.Date)
	return d
}

// Weekend reports whether Date falls on a Saturday or Sunday, when KRX never
// trades: a run on such a date calls nothing and skips every company.
func (p *Params) Weekend() bool {
	wd := p.Day().Weekday()
	return wd == time.Saturday || wd == time.Sunday
}

// Spec defines stockPrice: one day's KRX prices of the listed tracked
// companies.
//
// Estimate: one call per listed tracked company, none on a weekend. Only the
// database knows the companies: the catalog answers 0 and the api's
// estimator (Estimate) counts them.
func Spec() *catalog.Spec[Params] {
	return &catalog.Spec[Params]{
		JobName: Name,
		Desc: "Daily prices (KRX) on date of every listed tracked company, upserted into stock_price. " +
			"A day without trading (weekend, holiday) skips the companies with that reason instead of failing.",
		ProviderName:    "KRX",
		ChunkDesc:       "100 listed companies (one call each)",
		ExampleValue:    Params{Date: "2025-03-14"},
		DefaultSchedule: "0 18 * * 1-5",
		Scheduled: func(now time.Time) Params {
			return Params{Date: now.Format(time.DateOnly)}
		},
		Validate: func(p *Params) error {
			_, err := catalog.ParseDate(p.Date, "params.date")
			return err
		},
		Estimate: func(*Params) int { return 0 },
		CoverageDef: &catalog.Coverage{
			Targets:     "listed tracked companies (company.tracked with a stock_code)",
			Current:     "a stock_price row for the trading date (today, or the last weekday on a weekend)",
			DataDate:    catalog.LastWeekdayIn,
			OnlyMissing: true,
			Count:       countStockPriceCoverage,
			Missing:     missingStockPriceCoverage,
		},
	}
}

// Registration is stockPrice as a process registers it: its definition,
// its implementation and its call estimate, which counts the listed
// tracked companies (Estimate).
func Registration() batch.Registration {
	return batch.Registration{Definition: Spec(), Job: Job{}, Estimate: Estimate}
}

// countStockPriceCoverage is the job's coverage count (queries/coverage.sql).
func countStockPriceCoverage(ctx context.Context, db queries.DBTX, day time.Time) (int64, int64, error) {
	row, err := queries.New().CoverageStockPriceCount(ctx, db, day)
	if err != nil {
		return 0, 0, err
	}
	return row.Targets, row.Current, nil
}

// missingStockPriceCoverage is the job's missing list (queries/coverage.sql).
func missingStockPriceCoverage(ctx context.Context, db queries.DBTX, day time.Time, after string, limit int32) ([]string, error) {
	return queries.New().CoverageStockPriceMissing(ctx, db, &queries.CoverageStockPriceMissingParams{After: after, DataDate: day, RowLimit: limit})
}

// Package riskmetric is the metrics job: for every tracked company and one
// date it computes, from rows other jobs stored (no provider is called),
//
//   - drawdown_20d: the newest close against the highest close of the
//     company's last 20 stored trading days (stock_price), newest/highest −
//     1; NULL when unlisted or the newest price is over PriceMaxAgeDays old;
//   - risk_filings_90d: its risk-flagged filings received in the 90 days
//     ending on the date (filing);
//   - grade_change_notches: its latest credit grade (eval_date ≤ date)
//     against the previous one, the grade in force when the 90-day window
//     began (see gradeChange), in notches of upstream.CreditScale, positive
//     for a downgrade; NULL without an earlier evaluation (credit_grade);
//   - apt_volume_change and apt_price_change: apartment trades and their
//     median price per m² in the company's main regions (company_region),
//     the last 3 months against the 3 before, as recent/previous − 1; NULL
//     without regions or trades in the earlier window (apt_trade);
//
// and upserts them into risk_metric. One chunk is one company (the
// contract's unit; a company's reads are a handful of indexed queries), so
// a resume skips exactly the companies done. When it completes, rules
// follows with the same date (the catalog's NextJob).
package riskmetric

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
)

// ErrNoCompanies fails a run before any company is tracked.
var ErrNoCompanies = errors.New("no tracked companies: run corpCodeSync first")

// Job implements batch.Job for metrics.
type Job struct{}

var _ batch.Job = (*Job)(nil)
var _ batch.DomainRowCounter = (*Job)(nil)

// Plan implements batch.Job: one chunk per tracked company, keyed by its
// corp code (the date is in the params, hence in the instance).
func (Job) Plan(ctx context.Context, run *batch.Run) (*batch.Plan, error) {
	p, err := decode(run.Params)
	if err != nil {
		return nil, err
	}
	rows, err := queries.New().CompanyTrackedList(ctx, run.DB)
	if err != nil {
		return nil, fmt.Errorf("error listing tracked companies: %w", err)
	}
	if len(rows) == 0 {
		return nil, ErrNoCompanies
	}
	if p.OnlyMissing {
		// Coverage's own definition of the missing targets.
		chunks, err := batch.AllPages(func(after string, limit int32) ([]string, error) {
			return queries.New().CoverageMetricsMissing(ctx, run.DB, &queries.CoverageMetricsMissingParams{After: after, DataDate: p.Day(), RowLimit: limit})
		})
		if err != nil {
			return nil, fmt.Errorf("error listing the companies without metrics: %w", err)
		}
		return &batch.Plan{Chunks: chunks, Targets: batch.TargetsUnknown}, nil
	}
	chunks := make([]string, len(rows))
	for i, r := range rows {
		chunks[i] = r.CorpCode
	}
	return &batch.Plan{Chunks: chunks, Targets: batch.TargetsUnknown}, nil
}

// Process implements batch.Job: read the company's rows, compute its
// metrics, upsert them. The item is the company.
func (Job) Process(ctx context.Context, run *batch.Run, corpCode string) (*batch.ChunkResult, error) {
	p, err := decode(run.Params)
	if err != nil {
		return nil, err
	}
	m, err := Compute(ctx, run.DB, corpCode, p.Day())
	if err != nil {
		return nil, fmt.Errorf("company %s: %w", corpCode, err)
	}
	params := &queries.RiskMetricUpsertParams{
		CorpCode: corpCode, MetricDate: p.Day(), RiskFilings90d: m.RiskFilings90d,
		Drawdown20d: float8(m.Drawdown20d), GradeChangeNotches: m.GradeChangeNotches,
		AptVolumeChange: float8(m.AptVolumeChange), AptPriceChange: float8(m.AptPriceChange),
		ExecutionID: run.ExecutionID,
	}
	return &batch.ChunkResult{
		Targets: 1, Written: 1,
		Write: func(ctx context.Context, tx pgx.Tx) error {
			if err := queries.New().RiskMetricUpsert(ctx, tx, params); err != nil {
				return fmt.Errorf("error upserting metrics: %w", err)
			}
			return nil
		},
	}, nil
}

// DomainRows implements batch.DomainRowCounter.
func (Job) DomainRows(ctx context.Context, db queries.DBTX, executionIDs []int64) (int64, error) {
	return queries.New().RiskMetricCountByExecutions(ctx, db, executionIDs)
}

// Metrics are one company's metrics on one date; nil is NULL.
type Metrics struct {
	Drawdown20d        *float64
	RiskFilings90d     int32
	GradeChangeNotches *int32
	AptVolumeChange    *float64
	AptPriceChange     *float64
}

// Compute reads what the metrics of corpCode on day derive from and
// computes them. It only reads.
func Compute(ctx context.Context, db queries.DBTX, corpCode string, day time.Time) (*Metrics, error) {
	q := queries.New()
	m := &Metrics{}

	rows, err := q.StockPriceRecentByCorp(ctx, db, &queries.StockPriceRecentByCorpParams{
		CorpCode: corpCode, AsOf: day, MaxRows: DrawdownDays,
	})
	if err != nil {
		return nil, fmt.Errorf("error reading prices: %w", err)
	}
	closes := make([]Close, len(rows))
	for i, r := range rows {
		closes[i] = Close{Date: r.TradeDate, Close: r.Close}
	}
	m.Drawdown20d = Drawdown(closes, day)

	filingFrom, recentFrom, recentTo, previousFrom, previousTo := Windows(day)
	filings, err := q.FilingRiskCount(ctx, db, &queries.FilingRiskCountParams{CorpCode: corpCode, FromDate: filingFrom, ToDate: day})
	if err != nil {
		return nil, fmt.Errorf("error counting risk filings: %w", err)
	}
	m.RiskFilings90d = int32(filings)

	if m.GradeChangeNotches, err = gradeChange(ctx, db, corpCode, day); err != nil {
		return nil, err
	}

	regions, err := q.CompanyRegionListByCorp(ctx, db, corpCode)
	if err != nil {
		return nil, fmt.Errorf("error reading regions: %w", err)
	}
	if len(regions) > 0 {
		recent, err := q.AptTradeStatsByRegions(ctx, db, &queries.AptTradeStatsByRegionsParams{Regions: regions, FromDate: recentFrom, ToDate: recentTo})
		if err != nil {
			return nil, fmt.Errorf("error reading apartment trades: %w", err)
		}
		previous, err := q.AptTradeStatsByRegions(ctx, db, &queries.AptTradeStatsByRegionsParams{Regions: regions, FromDate: previousFrom, ToDate: previousTo})
		if err != nil {
			return nil, fmt.Errorf("error reading apartment trades: %w", err)
		}
		m.AptVolumeChange = Change(float64(recent.Trades), float64(previous.Trades))
		if recent.Trades > 0 {
			m.AptPriceChange = Change(recent.MedianPricePerM2, previous.MedianPricePerM2)
		}
	}
	return m, nil
}

func float8(v *float64) pgtype.Float8 {
	if v == nil {
		return pgtype.Float8{}
	}
	return pgtype.Float8{Float64: *v, Valid: true}
}

func decode(raw json.RawMessage) (*Params, error) {
	return Spec().Params(raw)
}

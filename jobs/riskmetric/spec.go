package riskmetric

import (
	"context"
	"time"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
)

// Name is the name of the risk-metric job.
const Name = "metrics"

// Windows of the metrics.
const (
	// DrawdownDays is the number of trading days (days with a stored
	// price) the price drawdown looks back over.
	DrawdownDays = 20
	// RiskFilingDays is the window of the risk-filing count, the metric
	// date included.
	RiskFilingDays = 90
	// AptWindowMonths is the length of each of the two apartment trade
	// windows compared.
	AptWindowMonths = 3
)

// Params are the params of metrics (and of rules, which it chains to). The
// API names their schema MetricsParams, after the job.
type Params struct {
	Date string `json:"date,omitempty" doc:"metric date, YYYY-MM-DD, from 2006 to the end of next year; default: today in Asia/Seoul" pattern:"^[0-9]{4}-[0-9]{2}-[0-9]{2}$" example:"2025-03-14"`
	// OnlyMissing plans only the tracked companies without metrics for
	// Date (coverage's missing targets); the rules run it chains to takes
	// it too.
	OnlyMissing bool `json:"onlyMissing,omitempty" doc:"compute only the tracked companies without metrics for the date (/v1/coverage's missing targets)" example:"false"`
}

// Day returns Date as a date. Only valid params.
func (p *Params) Day() time.Time {
	d, _ := time.Parse(time.DateOnly, p.Date)
	return d
}

// Spec defines metrics: per tracked company and date, the risk metrics
// computed from the stored prices, filings, credit grades and apartment
// trades. It calls no provider; when it completes, rules follows with the
// same date (which is why this package imports riskrule: for its name).
func Spec() *catalog.Spec[Params] { return spec(time.Now) }

func spec(now func() time.Time) *catalog.Spec[Params] {
	return &catalog.Spec[Params]{
		JobName: Name,
		Desc: "Computes per tracked company and date: price drawdown over 20 trading days, risk filings in 90 days, " +
			"credit grade change in notches, and apartment trade volume and median price change in the company's " +
			"main regions (last 3 months against the 3 before), into risk_metric. Chains to rules.",
		ChunkDesc:       "one company",
		ExampleValue:    Params{Date: "2025-03-14"},
		NextJob:         riskrule.Name,
		DefaultSchedule: "0 20 * * *",
		Scheduled: func(now time.Time) Params {
			return Params{Date: now.Format(time.DateOnly)}
		},
		Validate: func(p *Params) error { return catalog.ValidateOptionalDate(&p.Date, now) },
		Estimate: func(*Params) int { return 0 },
		CoverageDef: &catalog.Coverage{
			Targets:     "tracked companies (company.tracked)",
			Current:     "a risk_metric row for the metric date (today in BUILDRISK_TIMEZONE)",
			DataDate:    catalog.DayIn,
			OnlyMissing: true,
			Count:       countMetricsCoverage,
			Missing:     missingMetricsCoverage,
		},
	}
}

// Registration is metrics as a process registers it: its definition and
// its implementation.
func Registration() batch.Registration {
	return batch.Registration{Definition: Spec(), Job: Job{}}
}

// countMetricsCoverage is the job's coverage count (queries/coverage.sql).
func countMetricsCoverage(ctx context.Context, db queries.DBTX, day time.Time) (int64, int64, error) {
	row, err := queries.New().CoverageMetricsCount(ctx, db, day)
	if err != nil {
		return 0, 0, err
	}
	return row.Targets, row.Current, nil
}

// missingMetricsCoverage is the job's missing list (queries/coverage.sql).
func missingMetricsCoverage(ctx context.Context, db queries.DBTX, day time.Time, after string, limit int32) ([]string, error) {
	return queries.New().CoverageMetricsMissing(ctx, db, &queries.CoverageMetricsMissingParams{After: after, DataDate: day, RowLimit: limit})
}

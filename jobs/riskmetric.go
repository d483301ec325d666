package jobs

import "time"

// Metrics is the name of the risk-metric job.
const Metrics = "metrics"

// Windows of the metrics.
const (
	// MetricsDrawdownDays is the number of trading days (days with a stored
	// price) the price drawdown looks back over.
	MetricsDrawdownDays = 20
	// MetricsRiskFilingDays is the window of the risk-filing count, the
	// metric date included.
	MetricsRiskFilingDays = 90
	// MetricsAptWindowMonths is the length of each of the two apartment
	// trade windows compared.
	MetricsAptWindowMonths = 3
)

// MetricsParams are the params of metrics (and of rules, which it chains to).
type MetricsParams struct {
	Date string `json:"date,omitempty" doc:"metric date, YYYY-MM-DD, from 2006 to the end of next year; default: today in Asia/Seoul" pattern:"^[0-9]{4}-[0-9]{2}-[0-9]{2}$" example:"2025-03-14"`
	// OnlyMissing plans only the tracked companies without metrics for
	// Date (coverage's missing targets); the rules run it chains to takes
	// it too.
	OnlyMissing bool `json:"onlyMissing,omitempty" doc:"compute only the tracked companies without metrics for the date (/v1/coverage's missing targets)" example:"false"`
}

// Day returns Date as a date. Only valid params.
func (p *MetricsParams) Day() time.Time {
	d, _ := time.Parse(time.DateOnly, p.Date)
	return d
}

// MetricsSpec defines metrics: per tracked company and date, the risk
// metrics computed from the stored prices, filings, credit grades and
// apartment trades. It calls no provider; when it completes, rules follows
// with the same date.
func MetricsSpec() *Spec[MetricsParams] { return metricsSpec(time.Now) }

func metricsSpec(now func() time.Time) *Spec[MetricsParams] {
	return &Spec[MetricsParams]{
		JobName: Metrics,
		Desc: "Computes per tracked company and date: price drawdown over 20 trading days, risk filings in 90 days, " +
			"credit grade change in notches, and apartment trade volume and median price change in the company's " +
			"main regions (last 3 months against the 3 before), into risk_metric. Chains to rules.",
		ChunkDesc:       "one company",
		ExampleValue:    MetricsParams{Date: "2025-03-14"},
		NextJob:         Rules,
		DefaultSchedule: "0 20 * * *",
		Scheduled: func(now time.Time) MetricsParams {
			return MetricsParams{Date: now.Format(time.DateOnly)}
		},
		Validate: func(p *MetricsParams) error { return validateOptionalDate(&p.Date, now) },
		Estimate: func(*MetricsParams) int { return 0 },
		CoverageDef: &Coverage{
			Targets:     "tracked companies (company.tracked)",
			Current:     "a risk_metric row for the metric date (today in BUILDRISK_TIMEZONE)",
			DataDate:    DayIn,
			OnlyMissing: true,
		},
	}
}

// validateOptionalDate fills an empty date with today in Seoul, so that the
// canonical params always name the day (a rerun tomorrow is new work), and
// checks a given one.
func validateOptionalDate(date *string, now func() time.Time) error {
	if *date == "" {
		*date = TodayInSeoul(now())
		return nil
	}
	_, err := parseDate(*date, "params.date")
	return err
}

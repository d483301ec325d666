package riskmetric

import (
	"time"

	"github.com/buildrisk/radar/upstream"
)

// PriceMaxAgeDays bounds how old (in calendar days before the metric date)
// the newest stored price may be for a drawdown to be computed: an older
// one means stockPrice has not run lately, and a drawdown from stale prices
// would raise the same alert day after day.
const PriceMaxAgeDays = 10

// Close is one stored closing price.
type Close struct {
	Date  time.Time
	Close int64
}

// Drawdown returns how far the newest close is below the highest close of
// closes (newest first, at most DrawdownDays of them), as a
// fraction ≤ 0: newest/highest − 1. It is nil without closes, or when the
// newest is more than PriceMaxAgeDays before day.
func Drawdown(closes []Close, day time.Time) *float64 {
	if len(closes) == 0 || closes[0].Date.Before(day.AddDate(0, 0, -PriceMaxAgeDays)) {
		return nil
	}
	peak := closes[0].Close
	for _, c := range closes[:min(len(closes), DrawdownDays)] {
		peak = max(peak, c.Close)
	}
	if peak <= 0 {
		return nil
	}
	d := float64(closes[0].Close)/float64(peak) - 1
	return &d
}

// GradeChange returns the notches from previous to latest (positive is a
// downgrade, via upstream.GradeRank), or nil when either grade is missing
// or not on the scale.
func GradeChange(latest, previous string) *int32 {
	l, p := upstream.GradeRank(latest), upstream.GradeRank(previous)
	if l < 0 || p < 0 {
		return nil
	}
	n := int32(l - p)
	return &n
}

// Change returns recent/previous − 1, or nil when previous is not positive.
func Change(recent, previous float64) *float64 {
	if previous <= 0 {
		return nil
	}
	c := recent/previous - 1
	return &c
}

// Windows returns the date ranges (both ends included) of metrics' windows
// for day: the risk-filing window of RiskFilingDays days ending
// on day, and the two apartment-trade windows of
// AptWindowMonths months, recent = (day − 3 months, day] and
// previous = (day − 6 months, day − 3 months].
func Windows(day time.Time) (filingFrom time.Time, recentFrom, recentTo, previousFrom, previousTo time.Time) {
	filingFrom = day.AddDate(0, 0, -(RiskFilingDays - 1))
	recentTo = day
	previousTo = day.AddDate(0, -AptWindowMonths, 0)
	recentFrom = previousTo.AddDate(0, 0, 1)
	previousFrom = day.AddDate(0, -2*AptWindowMonths, 0).AddDate(0, 0, 1)
	return filingFrom, recentFrom, recentTo, previousFrom, previousTo
}

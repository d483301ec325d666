package catalog

import (
	"context"
	"time"

	"github.com/buildrisk/radar/queries"
)

// Coverage is a job's coverage definition, the second direction of the
// lost-events count (docs/architecture.md): from the domain tables alone, how many targets the
// job's source of truth names for a data date, and how many of them are
// current. The SQL of both sides is in queries/coverage.sql (one count and
// one missing list per job, which Count and Missing run; jobs/coverage
// caches and serves them); Targets and Current say the same in words for
// the job list, the API and the docs.
type Coverage struct {
	// Targets names the target set and its source of truth.
	Targets string
	// Current says when one target counts as current for the data date.
	Current string
	// DataDate returns the date whose rows must be current at now, in the
	// job's zone loc (BUILDRISK_TIMEZONE).
	DataDate func(now time.Time, loc *time.Location) time.Time
	// OnlyMissing reports whether the job's params take onlyMissing: a run
	// that plans only the missing targets of the data date.
	OnlyMissing bool
	// Count returns how many targets the data date day has and how many of
	// them are current, read through db. Required.
	Count func(ctx context.Context, db queries.DBTX, day time.Time) (targets, current int64, err error)
	// Missing returns up to limit of day's missing targets after the
	// target after ("" from the first), in key order, read through db.
	// Required.
	Missing func(ctx context.Context, db queries.DBTX, day time.Time, after string, limit int32) ([]string, error)
}

// DayIn returns the calendar day of now in loc, at midnight UTC (the form
// a SQL date scans into).
func DayIn(now time.Time, loc *time.Location) time.Time {
	y, m, d := now.In(loc).Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// LastWeekdayIn returns the latest Monday-to-Friday day in loc on or
// before now's day: the trading date (KRX trades on weekdays; a holiday
// counts as a trading day here, which the coverage alert allows for).
func LastWeekdayIn(now time.Time, loc *time.Location) time.Time {
	day := DayIn(now, loc)
	for day.Weekday() == time.Saturday || day.Weekday() == time.Sunday {
		day = day.AddDate(0, 0, -1)
	}
	return day
}

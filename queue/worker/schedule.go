package worker

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// ScheduleOff disables a job's schedule (BUILDRISK_SCHEDULE_<JOB>=off).
const ScheduleOff = "off"

// Timetable gives the due times of a schedule.
type Timetable interface {
	// Next returns the first due time strictly after t.
	Next(t time.Time) time.Time
}

// Schedule is one job's periodic request.
type Schedule struct {
	// Job is the job name.
	Job string
	// Spec is the schedule as configured: a cron expression (in the
	// configured time zone) or "@every <Go duration>".
	Spec string
	// Next gives the due times.
	Next Timetable
	// Params returns the params of the request made for a due time. They
	// derive from the due time (in the configured zone), never from the
	// clock when the request is inserted: a due time enqueued late, after
	// a failover or behind a long request, still fetches its own day.
	Params func(due time.Time) []byte
	// Period is the longest gap between two consecutive due times (see
	// SchedulePeriod): the job is expected to complete at least this often.
	Period time.Duration
	// CatchUp is how old a due time may be and still be enqueued when a
	// scheduler first sees it (after a leader change or a pause); older
	// ones are recorded missed. Zero means one Period.
	CatchUp time.Duration
}

// catchUpWindow returns CatchUp, or Period when it is unset.
func (s *Schedule) catchUpWindow() time.Duration {
	if s.CatchUp > 0 {
		return s.CatchUp
	}
	return s.Period
}

// ParseSchedule parses a cron expression evaluated in loc, or
// "@every <duration>" (sub-second allowed, for tests). The due times of
// "@every d" are the multiples of d since Go's zero time, so that every
// process, and every restart, computes the same ones.
func ParseSchedule(spec string, loc *time.Location) (Timetable, error) {
	spec = strings.TrimSpace(spec)
	if rest, ok := strings.CutPrefix(spec, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%q: @every needs a positive Go duration", spec)
		}
		return every(d), nil
	}
	sched, err := cron.ParseStandard("CRON_TZ=" + loc.String() + " " + spec)
	if err != nil {
		return nil, fmt.Errorf("%q is not a cron expression: %w", spec, err)
	}
	return sched, nil
}

// every is the timetable of "@every d".
type every time.Duration

// Next implements Timetable.
func (e every) Next(t time.Time) time.Time {
	return t.Truncate(time.Duration(e)).Add(time.Duration(e))
}

// periodHorizon and periodMaxTicks bound the due times SchedulePeriod
// looks at: a year, or the first 10,000 for a dense schedule.
const (
	periodHorizon  = 366 * 24 * time.Hour
	periodMaxTicks = 10_000
)

// SchedulePeriod returns the longest gap between consecutive due times of
// tt over the year after from (a weekday schedule's is the weekend's three
// days, a monthly one's 31 days). It is what the freshness alert allows.
func SchedulePeriod(tt Timetable, from time.Time) time.Duration {
	if e, ok := tt.(every); ok {
		return time.Duration(e)
	}
	var longest time.Duration
	prev := tt.Next(from)
	if prev.IsZero() {
		return 0
	}
	for range periodMaxTicks {
		next := tt.Next(prev)
		if next.IsZero() {
			break
		}
		longest = max(longest, next.Sub(prev))
		if next.Sub(from) > periodHorizon {
			break
		}
		prev = next
	}
	return longest
}

// DueTimes are the schedules as the request owner reads them, to hold a
// run resumed at a daily reset behind a scheduled run of its provider
// (request.DueTimes).
type DueTimes []Schedule

// NextDue implements request.DueTimes: the first due time of job's
// schedule at or after from.
func (d DueTimes) NextDue(job string, from time.Time) (time.Time, bool) {
	for _, s := range d {
		if s.Job == job {
			return s.Next.Next(from.Add(-time.Nanosecond)), true
		}
	}
	return time.Time{}, false
}

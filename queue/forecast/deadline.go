package forecast

import (
	"fmt"
	"time"
)

// Deadline is a time of day, in a zone, by which a job's run must be DONE
// (BUILDRISK_DEADLINE_<JOB>=HH:MM in BUILDRISK_TIMEZONE).
type Deadline struct {
	Hour, Minute int
	Location     *time.Location
}

// ParseDeadline parses "HH:MM" (00:00 to 23:59) in loc.
func ParseDeadline(s string, loc *time.Location) (Deadline, error) {
	t, err := time.Parse("15:04", s)
	if err != nil || len(s) != len("15:04") {
		return Deadline{}, fmt.Errorf("%q is not a time of day HH:MM (00:00 to 23:59)", s)
	}
	if loc == nil {
		loc = time.UTC
	}
	return Deadline{Hour: t.Hour(), Minute: t.Minute(), Location: loc}, nil
}

// String returns the deadline as HH:MM.
func (d Deadline) String() string { return fmt.Sprintf("%02d:%02d", d.Hour, d.Minute) }

// on returns the deadline on the calendar day of t (in the deadline's zone),
// days days later.
func (d Deadline) on(t time.Time, days int) time.Time {
	local := t.In(d.Location)
	return time.Date(local.Year(), local.Month(), local.Day()+days, d.Hour, d.Minute, 0, 0, d.Location)
}

// After returns the first occurrence strictly after t.
func (d Deadline) After(t time.Time) time.Time {
	if at := d.on(t, 0); at.After(t) {
		return at
	}
	return d.on(t, 1)
}

// AtOrBefore returns the newest occurrence at or before t.
func (d Deadline) AtOrBefore(t time.Time) time.Time {
	if at := d.on(t, 0); !at.After(t) {
		return at
	}
	return d.on(t, -1)
}

// Figures are what a job's deadline is judged by, read from the database.
type Figures struct {
	// ActiveSince is when the job's active request (QUEUED or RUNNING) was
	// created; nil when nothing is active.
	ActiveSince *time.Time
	// ForecastDoneAt is the running execution's forecast of its end; nil
	// when nothing runs or the run has no pace yet.
	ForecastDoneAt *time.Time
	// LastCompletedAt is the end of the job's newest COMPLETED execution.
	LastCompletedAt *time.Time
}

// Status is how a job stands against its deadline.
type Status string

// Statuses of a Judgement.
const (
	// OnTrack: nothing says the deadline will be missed.
	OnTrack Status = "on-track"
	// AtRisk: the active run is forecast to end after its deadline.
	AtRisk Status = "at-risk"
	// Late: the active run's deadline has passed, or, with nothing
	// running, the newest deadline passed without a DONE run since the
	// one before it.
	Late Status = "late"
)

// Judgement is a job's standing against its deadline at one moment.
type Judgement struct {
	// Deadline is the occurrence the job is held to: the first after the
	// active request was created (a missed one stays while that run goes
	// on), or the next one when nothing is active.
	Deadline time.Time
	// ForecastDoneAt is the running execution's forecast; nil when none.
	ForecastDoneAt *time.Time
	// Missed: the newest occurrence at or before now passed without a
	// COMPLETED execution since the occurrence before it (and none since).
	Missed bool
	Status Status
}

// ForecastLateBy is the forecast end minus the deadline (positive: late);
// nil without a forecast.
func (j Judgement) ForecastLateBy() *time.Duration {
	if j.ForecastDoneAt == nil {
		return nil
	}
	lateBy := j.ForecastDoneAt.Sub(j.Deadline)
	return &lateBy
}

// Judge judges a job with deadline d from its figures at now.
func Judge(d Deadline, f Figures, now time.Time) Judgement {
	j := Judgement{Deadline: d.After(now)}
	if f.ActiveSince != nil {
		j.Deadline = d.After(*f.ActiveSince)
	}
	if f.ActiveSince != nil && f.ForecastDoneAt != nil {
		at := *f.ForecastDoneAt
		j.ForecastDoneAt = &at
	}
	passed := d.AtOrBefore(now)
	previous := d.AtOrBefore(passed.Add(-time.Nanosecond))
	j.Missed = f.LastCompletedAt == nil || !f.LastCompletedAt.After(previous)
	switch {
	case f.ActiveSince != nil && now.After(j.Deadline):
		j.Status = Late
	case j.ForecastDoneAt != nil && j.ForecastDoneAt.After(j.Deadline):
		j.Status = AtRisk
	case f.ActiveSince == nil && j.Missed:
		j.Status = Late
	default:
		j.Status = OnTrack
	}
	return j
}

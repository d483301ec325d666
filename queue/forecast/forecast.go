// Package forecast predicts when a running execution ends, from its own
// measured pace and its provider's limits, and judges a job against its
// deadline: the time of day by which its run must be DONE.
//
// A run measures its progress in units: the provider calls it makes (its
// request's estimate is in calls) or, for a job that calls no provider, its
// chunks. Pace keeps the recent samples of that progress; DoneAt turns the
// units left into an end time, bounded by the provider's rate limit and
// moved past the daily reset when the calls left exceed what today's cap
// still allows. Judge compares that end with the deadline.
//
// The pace is the recent one, not the run's average: a provider that slows
// down mid-run moves the forecast within one window, and a run that stalls
// (no progress in the window) is forecast at most one unit per the time
// since its last progress, which grows late while the stall lasts.
package forecast

import (
	"errors"
	"math"
	"time"
)

// WindowDefault is the span of recent progress a Pace measures.
const WindowDefault = time.Minute

// Sample is a run's progress at one moment: the units done so far.
type Sample struct {
	At   time.Time
	Done float64
}

// Pace measures a run's rate of progress over a recent window. It is not
// safe for concurrent use: one run's forecaster owns it.
type Pace struct {
	window time.Duration
	// samples are oldest first: those within the window of the newest,
	// and the newest one before it, so that the span covers the window.
	samples []Sample
	// progressAt is when Done last grew; zero before any progress.
	progressAt time.Time
}

// NewPace returns a Pace over window (WindowDefault when 0).
func NewPace(window time.Duration) *Pace {
	if window <= 0 {
		window = WindowDefault
	}
	return &Pace{window: window}
}

// Observe records the units done at a moment (samples in time order).
func (p *Pace) Observe(at time.Time, done float64) {
	if n := len(p.samples); (n == 0 && done > 0) || (n > 0 && done > p.samples[n-1].Done) {
		p.progressAt = at
	}
	p.samples = append(p.samples, Sample{At: at, Done: done})
	// Drop the samples older than the one before the window.
	cut := 0
	for cut+1 < len(p.samples) && !p.samples[cut+1].At.After(at.Add(-p.window)) {
		cut++
	}
	p.samples = p.samples[cut:]
}

// Rate returns the units per second at now: the progress over the
// window's samples divided by the time from the oldest of them to now (a
// pause since the newest sample slows it). With no progress in the window
// it is one unit over the time since the last progress. ok is false while
// there is no progress at all.
func (p *Pace) Rate(now time.Time) (rate float64, ok bool) {
	if p.progressAt.IsZero() || len(p.samples) == 0 {
		return 0, false
	}
	first, last := p.samples[0], p.samples[len(p.samples)-1]
	if span := now.Sub(first.At).Seconds(); last.Done > first.Done && span > 0 {
		return (last.Done - first.Done) / span, true
	}
	since := now.Sub(p.progressAt).Seconds()
	if since <= 0 {
		return 0, false
	}
	return 1 / since, true
}

// Budget is a provider's daily cap as a run meets it.
type Budget struct {
	// Remaining is the calls today's cap still allows.
	Remaining int
	// Cap is the calls each new day allows.
	Cap int
	// UntilReset is the time left before the day's budget resets (the next
	// midnight in the budget's zone); each day after lasts 24 hours.
	UntilReset time.Duration
}

// Input is what DoneAt forecasts from.
type Input struct {
	Now time.Time
	// Left is the units left.
	Left float64
	// Rate is the measured units per second (Pace.Rate); 0 when unknown.
	Rate float64
	// CallsPerUnit is the provider calls one unit costs: 1 when the units
	// are calls, 0 when they call no provider (no rate limit or budget
	// applies).
	CallsPerUnit float64
	// RateLimit is the provider's calls per second for the whole fleet
	// (BUILDRISK_RATE_<P>); 0 when it has none.
	RateLimit float64
	// Budget is the provider's daily cap; nil when it has none.
	Budget *Budget
}

// ErrNoPace is returned by DoneAt when nothing tells the pace: no progress
// measured yet and no rate limit to bound it.
var ErrNoPace = errors.New("forecast: no pace measured yet")

// maxDays bounds the days a forecast spans across daily resets.
const maxDays = 366

// DoneAt forecasts when a run with in.Left units left ends: at the measured
// pace, never faster than the provider's rate limit allows, and, when the
// calls left exceed what today's cap still allows, past the reset (each
// day after allowing Budget.Cap calls). A run with nothing left is done now.
func DoneAt(in Input) (time.Time, error) {
	if in.Left <= 0 {
		return in.Now, nil
	}
	rate := in.Rate
	if in.RateLimit > 0 && in.CallsPerUnit > 0 {
		limit := in.RateLimit / in.CallsPerUnit
		if rate <= 0 || limit < rate {
			rate = limit
		}
	}
	if rate <= 0 {
		return time.Time{}, ErrNoPace
	}
	if in.Budget == nil || in.CallsPerUnit <= 0 {
		return in.Now.Add(seconds(in.Left / rate)), nil
	}
	// Spend the budget day by day: each day, until its reset, the run
	// goes at its pace as long as the day's calls last.
	at, left := in.Now, in.Left
	allowed := float64(max(in.Budget.Remaining, 0)) / in.CallsPerUnit
	dayLeft := in.Budget.UntilReset
	for day := 0; day < maxDays; day++ {
		doable := math.Min(allowed, rate*dayLeft.Seconds())
		if left <= doable {
			return at.Add(seconds(left / rate)), nil
		}
		left -= doable
		at = at.Add(dayLeft)
		allowed = float64(max(in.Budget.Cap, 0)) / in.CallsPerUnit
		dayLeft = 24 * time.Hour
	}
	return time.Time{}, errors.New("forecast: the run needs more than a year of daily budgets")
}

func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second))
}

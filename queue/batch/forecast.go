package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/forecast"
	"github.com/buildrisk/radar/queue/service"
	"github.com/buildrisk/radar/upstream"
)

// A run forecasts its own end (queue/forecast) and records it on its
// execution (forecast_done_at) every Config.ForecastInterval, for the job
// list and the deadline gauges. Its progress is counted in the finest unit
// it knows as it goes:
//
//   - items, when its plan declares its targets and it calls a provider
//     (creditEval): the items committed, parts of a fan-out chunk
//     included, so a chunk of 2,000 items shows its pace from its first
//     seconds. Their cost in calls is measured too (the calls made per item
//     so far, weighed against the estimate's while few items are done), for
//     the rate limit and the budget.
//   - provider calls, when its targets are learnt chunk by chunk (aptTrade):
//     the calls its Caller made, against its request's estimate.
//   - chunks, for a job that calls no provider.
//
// Items rather than calls where they can: the estimate allows for fallback
// calls the provider may not need (creditEval's allows 10 %, the provider
// runs at about 5 %), and a forecast counted against it stays that much
// late until the end.

// priorItems is how many items' worth of weight the estimate's calls per
// item keeps against the measured figure.
const priorItems = 50

// Units of a forecaster's progress.
const (
	unitItems  = "items"
	unitCalls  = "calls"
	unitChunks = "chunks"
)

// forecaster is one run's forecast loop.
type forecaster struct {
	r    *Runner
	rs   *runState
	run  *Run
	pace *forecast.Pace
	unit string
	// total is the run's units: the targets it has left, its request's
	// estimated calls, or the chunks it had to do.
	total float64
	// estimatedCalls is the request's estimate: the calls per item before
	// any item is done.
	estimatedCalls float64
	provider       upstream.Provider
	// chunks counts the chunks the run committed.
	chunks atomic.Int64
}

// newForecaster returns the forecaster of rs's run, which has pending of
// plan's chunks to do and finds itemsBefore of its targets committed by
// earlier executions (-1: unknown).
func (r *Runner) newForecaster(rs *runState, run *Run, plan *Plan, pending int, itemsBefore int64) *forecaster {
	f := &forecaster{r: r, rs: rs, run: run, pace: forecast.NewPace(r.cfg.ForecastWindow), estimatedCalls: float64(rs.request.EstimatedCalls)}
	provider, calls := r.cfg.Providers[rs.request.Job]
	calls = calls && provider != "" && rs.request.EstimatedCalls > 0
	switch {
	case calls && plan.Targets > 0 && itemsBefore >= 0:
		f.unit, f.provider, f.total = unitItems, provider, float64(max(plan.Targets-itemsBefore, 0))
	case calls:
		f.unit, f.provider, f.total = unitCalls, provider, f.estimatedCalls
	default:
		f.unit, f.total = unitChunks, float64(pending)
	}
	f.pace.Observe(time.Now(), 0)
	return f
}

// chunkCommitted counts a committed chunk.
func (f *forecaster) chunkCommitted() { f.chunks.Add(1) }

// start runs the forecast every ForecastInterval, each pass bounded by
// DBTimeout, until the returned stop is called. A failed pass is logged
// (once per run of failures) and left to the next: the forecast is a view,
// never a reason to stop the run.
func (f *forecaster) start(ctx context.Context) (stop func()) {
	loop := service.New(service.Config{
		Name: "run forecast", Interval: f.r.cfg.ForecastInterval, Timeout: f.r.cfg.DBTimeout,
		Logger: f.rs.logger, Pass: f.record,
	})
	_ = loop.Start(ctx) // never fails
	return loop.Stop
}

// record measures the progress, forecasts and records the forecast on the
// execution (NULL while the run has no pace).
func (f *forecaster) record(ctx context.Context) error {
	at, err := f.doneAt(ctx, time.Now())
	var value *time.Time
	switch {
	case err == nil:
		value = &at
	case !errors.Is(err, forecast.ErrNoPace):
		return fmt.Errorf("error forecasting the run's end: %w", err)
	}
	st := f.rs.started
	if _, err := f.r.queries.JobExecutionForecastSet(ctx, f.r.pool, &queries.JobExecutionForecastSetParams{
		ForecastDoneAt: value, ID: st.exec.ID, WorkerID: st.exec.WorkerID, LeaseEpoch: st.exec.LeaseEpoch,
	}); err != nil {
		return fmt.Errorf("error recording the forecast of the run's end: %w", err)
	}
	return nil
}

// doneAt forecasts the run's end at now.
func (f *forecaster) doneAt(ctx context.Context, now time.Time) (time.Time, error) {
	calls := float64(f.run.Calls.Calls())
	var done, callsPerUnit float64
	switch f.unit {
	case unitItems:
		done = float64(f.rs.items.committedTotal())
		// The calls per item measured, weighed against the estimate's
		// until enough items are done: the calls in flight are counted
		// before their items commit, which early on would make an item
		// look several calls dear.
		estimated := f.estimatedCalls / max(f.total, 1)
		callsPerUnit = (calls + estimated*priorItems) / (done + priorItems)
	case unitCalls:
		done, callsPerUnit = calls, 1
	default:
		done = float64(f.chunks.Load())
	}
	f.pace.Observe(now, done)
	rate, _ := f.pace.Rate(now)
	in := forecast.Input{Now: now, Left: max(f.total-done, 0), Rate: rate}
	if f.unit == unitChunks {
		return forecast.DoneAt(in)
	}
	up := f.r.cfg.Upstream
	in.CallsPerUnit, in.RateLimit = callsPerUnit, up.RateLimit(f.provider)
	if limit := up.DailyCap(f.provider); limit > 0 {
		remaining, err := up.Remaining(ctx, f.provider)
		if err != nil {
			return time.Time{}, err
		}
		// The run's own leased calls are counted as used, yet are its own.
		remaining += f.run.Calls.Unspent(f.provider)
		in.Budget = &forecast.Budget{Remaining: remaining, Cap: limit, UntilReset: up.UntilReset()}
	}
	return forecast.DoneAt(in)
}

// itemsCommitted counts the items of rs's instance committed before the
// run, for its forecast when plan declares its targets; -1 when it does
// not or the count fails (the forecast then counts calls: it is a view,
// never a reason to stop the run).
func (r *Runner) itemsCommitted(ctx context.Context, rs *runState, plan *Plan) int64 {
	if plan.Targets <= 0 {
		return -1
	}
	readCtx, cancel := context.WithTimeout(ctx, r.cfg.DBTimeout)
	defer cancel()
	n, err := r.queries.JobInstanceItemsCommitted(readCtx, r.pool, rs.exec.InstanceID)
	if err != nil {
		rs.logger.DebugContext(ctx, "could not count the items committed before the run", slog.String("error", err.Error()))
		return -1
	}
	return n
}

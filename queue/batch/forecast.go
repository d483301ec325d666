package batch

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/forecast"
	"github.com/buildrisk/radar/upstream"
)

// A run forecasts its own end (queue/forecast) and records it on its
// execution (forecast_done_at) every Config.ForecastInterval, for the job
// list and the deadline gauges. Its progress is counted in the unit its
// request's estimate is in: provider calls (the run's Caller counts them
// as they are made, not at commits, so a chunk of 2,000 fanned-out items
// shows its pace from its first seconds), or, for a job that calls no
// provider, the chunks it committed. The calls forecast is bounded by the
// provider's rate limit and carried past the daily reset when the calls
// left exceed what today's cap still allows.

// forecaster is one run's forecast loop.
type forecaster struct {
	r    *Runner
	rs   *runState
	run  *Run
	pace *forecast.Pace
	// total is the run's units: its request's estimated calls, or the
	// chunks it had to do.
	total float64
	// calls says the units are calls of provider.
	calls    bool
	provider upstream.Provider
	// chunks counts the chunks the run committed (the unit of a job that
	// calls no provider).
	chunks atomic.Int64
	began  time.Time
}

// newForecaster returns the forecaster of rs's run, which has pending
// chunks to do.
func (r *Runner) newForecaster(rs *runState, run *Run, pending int) *forecaster {
	f := &forecaster{r: r, rs: rs, run: run, pace: forecast.NewPace(r.cfg.ForecastWindow), began: time.Now()}
	provider, ok := r.cfg.Providers[rs.request.Job]
	if ok && provider != "" && rs.request.EstimatedCalls > 0 {
		f.calls, f.provider, f.total = true, provider, float64(rs.request.EstimatedCalls)
	} else {
		f.total = float64(pending)
	}
	f.pace.Observe(f.began, 0)
	return f
}

// chunkCommitted counts a committed chunk.
func (f *forecaster) chunkCommitted() { f.chunks.Add(1) }

// start runs the loop until the returned stop is called.
func (f *forecaster) start(ctx context.Context) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		ticker := time.NewTicker(f.r.cfg.ForecastInterval)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-ticker.C:
				f.tick(ctx, time.Now())
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// tick measures the progress, forecasts and records the forecast. A
// failed write is logged and left to the next tick: the forecast is a
// view, never a reason to stop the run.
func (f *forecaster) tick(ctx context.Context, now time.Time) {
	at, err := f.doneAt(ctx, now)
	var value *time.Time
	switch {
	case err == nil:
		value = &at
	case !errors.Is(err, forecast.ErrNoPace):
		f.rs.logger.DebugContext(ctx, "no forecast of the run's end", slog.String("error", err.Error()))
	}
	st := f.rs.started
	writeCtx, cancel := context.WithTimeout(ctx, f.r.cfg.DBTimeout)
	defer cancel()
	if _, err := f.r.queries.JobExecutionForecastSet(writeCtx, f.r.pool, &queries.JobExecutionForecastSetParams{
		ForecastDoneAt: value, ID: st.exec.ID, WorkerID: st.exec.WorkerID, LeaseEpoch: st.exec.LeaseEpoch,
	}); err != nil && ctx.Err() == nil {
		f.rs.logger.DebugContext(ctx, "could not record the forecast of the run's end", slog.String("error", err.Error()))
	}
}

// doneAt forecasts the run's end at now.
func (f *forecaster) doneAt(ctx context.Context, now time.Time) (time.Time, error) {
	done := float64(f.chunks.Load())
	if f.calls {
		done = float64(f.run.Calls.Calls())
	}
	f.pace.Observe(now, done)
	rate, _ := f.pace.Rate(now)
	in := forecast.Input{Now: now, Left: max(f.total-done, 0), Rate: rate}
	if !f.calls {
		return forecast.DoneAt(in)
	}
	up := f.r.cfg.Upstream
	in.CallsPerUnit, in.RateLimit = 1, up.RateLimit(f.provider)
	if limit := up.DailyCap(f.provider); limit > 0 {
		readCtx, cancel := context.WithTimeout(ctx, f.r.cfg.DBTimeout)
		remaining, err := up.Remaining(readCtx, f.provider)
		cancel()
		if err != nil {
			return time.Time{}, err
		}
		in.Budget = &forecast.Budget{Remaining: remaining, Cap: limit, UntilReset: up.UntilReset()}
	}
	return forecast.DoneAt(in)
}

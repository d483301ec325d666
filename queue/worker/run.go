package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
)

// runWorker is the River worker of runs: every job of the catalog runs
// through it.
type runWorker struct {
	river.WorkerDefaults[catalog.RequestArgs]
	w *Worker
}

// Timeout disables River's per-job timeout: chunks bound the work, and the
// reaper handles dead workers.
func (rw *runWorker) Timeout(*river.Job[catalog.RequestArgs]) time.Duration { return -1 }

// Work runs one request. Its River job only delivers the request: the
// run's claim completes it, in the transaction that starts the run (see
// request.Owner), and from then on the request row alone tracks the run,
// so what Work returns after a claim changes nothing in River. Before a
// claim it hands the job back (a snooze) while the request may not start
// yet, and cancels it with the request's failure when the run cannot
// start.
func (rw *runWorker) Work(ctx context.Context, job *river.Job[catalog.RequestArgs]) error {
	w := rw.w
	// A request that may not start yet (an automatic resume's backoff, by
	// the database's clock) goes back to River available, for at most
	// SnoozeMax at a time: River's leader is on no resume's path.
	wait, err := queries.New().JobRequestWait(ctx, w.pool, job.Args.RequestID)
	if err != nil && !errors.Is(queries.Interpret(err), queries.ErrNotFound) {
		return river.JobSnooze(time.Second) // the run's start would meet the same database
	}
	if wait > 0 {
		return river.JobSnooze(min(time.Duration(wait*float64(time.Second)), SnoozeMax))
	}
	// Continue the trace of the request's insert (the API's POST): the run's
	// spans become its children, so one trace shows enqueue → run.
	if parent := enqueueSpanContext(job.Metadata); parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	outcome, err := w.runner.Run(ctx, batch.RunOpts{RequestID: job.Args.RequestID, Delivery: job})
	switch {
	case outcome != nil, err == nil, errors.Is(err, batch.ErrNotQueued):
		// The claim ended the delivery: whatever the run's end, its
		// request records it (or the reconcile loop, or whoever took the
		// run over).
		return nil
	case errors.Is(err, batch.ErrExecutionActive):
		// An execution of the job is still ending (STOPPING): the request
		// waits for it, still QUEUED, instead of failing at start.
		w.cfg.Logger.InfoContext(ctx, "request waits for the job's active execution to end", slog.Int64("request_id", job.Args.RequestID), slog.String("reason", err.Error()))
		return river.JobSnooze(time.Second)
	case errors.Is(err, batch.ErrFenced):
		// Fenced before the run could start: the request is still QUEUED;
		// try again once the database answers.
		return river.JobSnooze(min(w.cfg.HeartbeatInterval, SnoozeMax))
	default:
		// The run could not start: keep its real error on the request
		// instead of leaving it QUEUED for the reaper to call orphaned;
		// its River job ends with it, in the same transaction.
		w.owner.FailStart(ctx, job.Args.RequestID, w.cfg.ID, job, err)
		return nil
	}
}

// enqueueSpanContext reads the W3C trace context otelriver stored in the
// job's metadata when it was inserted.
func enqueueSpanContext(metadata []byte) trace.SpanContext {
	var meta map[string]any
	if err := json.Unmarshal(metadata, &meta); err != nil {
		return trace.SpanContext{}
	}
	carrier := propagation.MapCarrier{}
	for k, v := range meta {
		if s, ok := v.(string); ok {
			carrier[k] = s
		}
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
}

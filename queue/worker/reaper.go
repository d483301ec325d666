package worker

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/internal/service"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtx"
)

// ReaperConfig configures a Reaper.
type ReaperConfig struct {
	StaleAfter  time.Duration
	Instruments *observability.Instruments
	Logger      *slog.Logger
	// Resumer, when set, applies the resume policy in the transaction that
	// abandons a dead worker's execution, so the run's automatic resume (if
	// the policy allows it) commits with the reap. The process's Enqueuer
	// cleans up with the Reaper, so it is handed over after both are made
	// (ResumeThrough); nil resumes nothing.
	Resumer Resumer
	// River cancels the River jobs of the requests it reaps; nil when the
	// process inserts none.
	River request.JobCanceller
	// Reachability is the process's link to the database, shared with its
	// heartbeat or probe; the reaper's own passes feed it too. Nil makes one
	// of the reaper's own.
	Reachability *Reachability
}

// Resumer applies the resume policy to a run that stopped, inside the
// transaction that records the stop: request.Enqueuer.
type Resumer interface {
	ResumeTx(ctx context.Context, tx pgx.Tx, stopped *request.Stopped) (int64, error)
}

// Reaper finalizes the requests of dead workers: only those, never a live
// worker's, whatever their age: a long run on a live worker is slow, not
// dead, and finalizing it would let a second run of the same job start.
type Reaper struct {
	cfg     ReaperConfig
	pool    *pgxpool.Pool
	queries *queries.Queries
}

// NewReaper returns a Reaper.
func NewReaper(pool *pgxpool.Pool, cfg ReaperConfig) *Reaper {
	cfg.StaleAfter = cmp.Or(cfg.StaleAfter, StaleAfterDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Reachability == nil {
		cfg.Reachability = NewReachability()
	}
	return &Reaper{cfg: cfg, pool: pool, queries: queries.New()}
}

// CleanupTx is ReapTx for one job as the enqueue's cleanup
// (request.CleanupFunc): a dead worker's request of job is finalized before
// the duplicate check, so it does not answer 409.
func (r *Reaper) CleanupTx(ctx context.Context, tx pgx.Tx, job string) error {
	_, err := r.ReapTx(ctx, tx, job)
	return err
}

// ResumeThrough sets the Reaper's Resumer. The process's one Enqueuer
// reaps through this Reaper before each enqueue and this Reaper resumes
// through that Enqueuer, so one of the two learns the other after both are
// made: the composition root calls this once, before either is used.
func (r *Reaper) ResumeThrough(resumer Resumer) { r.cfg.Resumer = resumer }

// terminateWait is how long the reaper waits for each backend of a dead
// worker it ends to exit (and release its locks).
const terminateWait = time.Second

// Reap finalizes, in its own transaction, the requests held by stale
// workers (job "" = every job) and returns how many. First, in a statement
// of its own, it ends the server backends of the stale workers
// (WorkerStaleBackendsTerminate: those whose application_name is a stale
// worker's id and that the reaper's role may signal), so that a dead
// worker's open transaction does not keep its rows locked until the server
// notices; ReapTx then skips, without waiting, any execution still locked.
func (r *Reaper) Reap(ctx context.Context, job string) (int, error) {
	if n, err := r.queries.WorkerStaleBackendsTerminate(ctx, r.pool, &queries.WorkerStaleBackendsTerminateParams{
		WaitMs: terminateWait.Milliseconds(), StaleSeconds: r.cfg.StaleAfter.Seconds(),
	}); err != nil {
		// An unreachable database fails the pass that follows too, and the
		// pass's failure is what is logged (once, by its service).
		level := slog.LevelWarn
		if pgtx.IsTransient(err) {
			level = slog.LevelDebug
		}
		r.cfg.Logger.Log(ctx, level, "could not end the backends of stale workers", slog.String("error", err.Error()))
	} else if n > 0 {
		r.cfg.Logger.WarnContext(ctx, "ended the database backends of stale workers", slog.Int64("backends", n))
	}
	var n int
	err := pgtx.InTx(ctx, r.pool, func(tx pgx.Tx) error {
		var err error
		n, err = r.ReapTx(ctx, tx, job)
		return err
	})
	r.cfg.Reachability.Observe(err)
	return n, err
}

// ReapTx is Reap inside the caller's transaction; the API runs it under the
// job's advisory lock before its duplicate check (cleanup before enqueue).
//
// A reaper whose process was cut off from the database reaps nothing until
// it has reached the database again for one stale window (Reachability):
// the workers it would judge may have been cut off with it, and a live one
// must have had the chance to beat again.
func (r *Reaper) ReapTx(ctx context.Context, tx pgx.Tx, job string) (int, error) {
	if wait := r.cfg.Reachability.Wait(r.cfg.StaleAfter); wait > 0 {
		r.cfg.Logger.DebugContext(ctx, "not reaping: this process was cut off from the database; it waits one stale window after reconnecting",
			slog.Duration("wait", wait))
		return 0, nil
	}
	var jobFilter *string
	if job != "" {
		jobFilter = &job
	}
	stale, err := r.queries.JobRequestListStale(ctx, tx, &queries.JobRequestListStaleParams{
		Job: jobFilter, StaleSeconds: r.cfg.StaleAfter.Seconds(),
	})
	if err != nil {
		return 0, fmt.Errorf("error listing stale requests: %w", err)
	}
	reaped := 0
	for _, s := range stale {
		last := "never"
		if s.WorkerHeartbeatAt != nil {
			// The age is the database's (now() - heartbeat_at), like the
			// staleness itself: never this process's clock.
			age := time.Duration(s.HeartbeatAgeSeconds * float64(time.Second))
			last = fmt.Sprintf("%s (%s ago)", s.WorkerHeartbeatAt.UTC().Format(time.RFC3339), age.Round(time.Second))
		}
		if s.ExecutionID != nil {
			// The dead worker may still hold the execution's row in a
			// transaction the server has not ended yet: skip it for this
			// pass instead of waiting on the lock (and failing the pass for
			// every other job with a lock timeout).
			locked, err := r.queries.JobExecutionLockSkipLocked(ctx, tx, *s.ExecutionID)
			if err != nil {
				return reaped, fmt.Errorf("error locking execution %d: %w", *s.ExecutionID, err)
			}
			if len(locked) == 0 {
				r.cfg.Logger.WarnContext(ctx, "execution of a stale worker is still locked by an open transaction; reaping it on a later pass",
					slog.Int64("request_id", s.ID), slog.Int64("execution_id", *s.ExecutionID), slog.String("worker_id", deref(s.WorkerID)))
				continue
			}
		}
		msg := fmt.Sprintf("worker %s stopped heartbeating (last heartbeat %s); execution abandoned; a new request resumes from the last commit", deref(s.WorkerID), last)
		if s.ExecutionID == nil {
			// Claimed (at its River job's fetch) but never started.
			msg = fmt.Sprintf("worker %s stopped heartbeating (last heartbeat %s) before it started the run; nothing ran; request again", deref(s.WorkerID), last)
		}
		ok, err := request.Abandon(ctx, tx, r.cfg.River, s.ID, s.ExecutionID, s.RiverJobID, msg)
		if err != nil {
			return reaped, err
		}
		if ok {
			reaped++
			r.cfg.Instruments.StaleHeartbeatReaped(ctx)
			r.cfg.Logger.WarnContext(ctx, "reaped request of a stale worker",
				slog.Int64("request_id", s.ID), slog.String("job", s.Job), slog.String("worker_id", deref(s.WorkerID)))
			if err := r.resume(ctx, tx, s.ID, s.ExecutionID); err != nil {
				return reaped, err
			}
		}
	}
	orphans, err := r.queries.JobRequestListOrphaned(ctx, tx, &queries.JobRequestListOrphanedParams{
		Job: jobFilter, StaleSeconds: r.cfg.StaleAfter.Seconds(),
	})
	if err != nil {
		return reaped, fmt.Errorf("error listing orphaned requests: %w", err)
	}
	for _, o := range orphans {
		msg := "no worker will run it: its River job ended without running it; request again"
		if o.FetchedBy != "" {
			last := "never"
			if o.FetchedByHeartbeatAt != nil {
				last = o.FetchedByHeartbeatAt.UTC().Format(time.RFC3339)
			}
			msg = fmt.Sprintf("worker %s stopped heartbeating (last heartbeat %s) before it started the run; nothing ran; request again", o.FetchedBy, last)
		}
		ok, err := request.Abandon(ctx, tx, r.cfg.River, o.ID, nil, o.RiverJobID, msg)
		if err != nil {
			return reaped, err
		}
		if ok && o.FetchedBy != "" {
			// A dead worker's request, found by its River job: counted as
			// the stale reap counts the ones it finds by their worker.
			r.cfg.Instruments.StaleHeartbeatReaped(ctx)
			r.cfg.Logger.WarnContext(ctx, "reaped request of a stale worker",
				slog.Int64("request_id", o.ID), slog.String("job", o.Job), slog.String("worker_id", o.FetchedBy))
		} else if ok {
			r.cfg.Instruments.RequestFailed(ctx, o.Job, observability.ReasonOrphaned)
			r.cfg.Logger.WarnContext(ctx, "failed an orphaned request: no worker will run it",
				slog.Int64("request_id", o.ID), slog.String("job", o.Job), slog.Any("river_job_id", o.RiverJobID))
		}
	}
	return reaped, nil
}

// Run reaps every interval until ctx ends, each pass bounded by the stale
// window, logging failures as one line. API processes run it too, so that
// a fleet with no live worker still frees (and shows FAILED) the requests
// of its dead workers within StaleAfter + interval.
func (r *Reaper) Run(ctx context.Context, interval time.Duration) {
	r.Service(interval).Run(ctx)
}

// Service returns the reaper as a background service that reaps every
// interval (what Run runs), for a caller that starts, stops or triggers it.
func (r *Reaper) Service(interval time.Duration) *service.Service {
	return service.New(service.Config{Name: "reap", Interval: interval, Timeout: r.cfg.StaleAfter, Logger: r.cfg.Logger, Pass: func(ctx context.Context) error {
		_, err := r.Reap(ctx, "")
		return err
	}})
}

// CleanupPreviousBoots finalizes at once the requests that earlier boots of
// this pid@hostname slot left active: the same slot restarting means those
// boots are dead, whatever their heartbeat says.
func (r *Reaper) CleanupPreviousBoots(ctx context.Context, hostname string, pid int, currentID string) (int, error) {
	n := 0
	err := pgtx.InTx(ctx, r.pool, func(tx pgx.Tx) error {
		n = 0
		rows, err := r.queries.JobRequestListPreviousBoot(ctx, tx, &queries.JobRequestListPreviousBootParams{
			SlotPrefix: fmt.Sprintf("%d@%s#%%", pid, hostname), CurrentID: currentID,
		})
		if err != nil {
			return fmt.Errorf("error listing previous boot requests: %w", err)
		}
		for _, row := range rows {
			msg := fmt.Sprintf("worker %s restarted as %s; execution abandoned; a new request resumes from the last commit", deref(row.WorkerID), currentID)
			ok, err := request.Abandon(ctx, tx, r.cfg.River, row.ID, row.ExecutionID, row.RiverJobID, msg)
			if err != nil {
				return err
			}
			if ok {
				n++
				r.cfg.Instruments.StaleHeartbeatReaped(ctx)
				if err := r.resume(ctx, tx, row.ID, row.ExecutionID); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return n, err
}

// resume hands a reaped run to the resume policy. A request that never
// started an execution has nothing to resume.
func (r *Reaper) resume(ctx context.Context, tx pgx.Tx, requestID int64, executionID *int64) error {
	if r.cfg.Resumer == nil || executionID == nil {
		return nil
	}
	req, err := r.queries.JobRequestGetByID(ctx, tx, requestID)
	if err != nil {
		return fmt.Errorf("error reading reaped request %d: %w", requestID, err)
	}
	if _, err := r.cfg.Resumer.ResumeTx(ctx, tx, &request.Stopped{Request: req, ExecutionID: *executionID, Cause: radartype.CauseReap}); err != nil {
		return fmt.Errorf("error resuming reaped request %d: %w", requestID, err)
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

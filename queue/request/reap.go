package request

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/service"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtx"
)

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
func (o *Owner) Reap(ctx context.Context, job string) (int, error) {
	if n, err := o.queries.WorkerStaleBackendsTerminate(ctx, o.pool, &queries.WorkerStaleBackendsTerminateParams{
		WaitMs: terminateWait.Milliseconds(), StaleSeconds: o.cfg.StaleAfter.Seconds(),
	}); err != nil {
		// An unreachable database fails the pass that follows too, and the
		// pass's failure is what is logged (once, by its service).
		level := slog.LevelWarn
		if pgtx.IsTransient(err) {
			level = slog.LevelDebug
		}
		o.cfg.Logger.Log(ctx, level, "could not end the backends of stale workers", slog.String("error", err.Error()))
	} else if n > 0 {
		o.cfg.Logger.WarnContext(ctx, "ended the database backends of stale workers", slog.Int64("backends", n))
	}
	var n int
	err := pgtx.InTx(ctx, o.pool, func(tx pgx.Tx) error {
		var err error
		n, err = o.ReapTx(ctx, tx, job)
		return err
	})
	o.cfg.Reachability.Observe(err)
	return n, err
}

// ReapTx is Reap inside the caller's transaction; the API runs it under the
// job's advisory lock before its duplicate check (cleanup before enqueue).
//
// A reaper whose process was cut off from the database reaps nothing until
// it has reached the database again for one stale window (Reachability):
// the workers it would judge may have been cut off with it, and a live one
// must have had the chance to beat again.
func (o *Owner) ReapTx(ctx context.Context, tx pgx.Tx, job string) (int, error) {
	if wait := o.cfg.Reachability.Wait(o.cfg.StaleAfter); wait > 0 {
		o.cfg.Logger.DebugContext(ctx, "not reaping: this process was cut off from the database; it waits one stale window after reconnecting",
			slog.Duration("wait", wait))
		return 0, nil
	}
	var jobFilter *string
	if job != "" {
		jobFilter = &job
	}
	stale, err := o.queries.JobRequestListStale(ctx, tx, &queries.JobRequestListStaleParams{
		Job: jobFilter, StaleSeconds: o.cfg.StaleAfter.Seconds(),
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
			locked, err := o.queries.JobExecutionLockSkipLocked(ctx, tx, *s.ExecutionID)
			if err != nil {
				return reaped, fmt.Errorf("error locking execution %d: %w", *s.ExecutionID, err)
			}
			if len(locked) == 0 {
				o.cfg.Logger.WarnContext(ctx, "execution of a stale worker is still locked by an open transaction; reaping it on a later pass",
					slog.Int64("request_id", s.ID), slog.Int64("execution_id", *s.ExecutionID), slog.String("worker_id", deref(s.WorkerID)))
				continue
			}
		}
		msg := fmt.Sprintf("worker %s stopped heartbeating (last heartbeat %s); execution abandoned; a new request resumes from the last commit", deref(s.WorkerID), last)
		if s.ExecutionID == nil {
			// Claimed (at its River job's fetch) but never started.
			msg = fmt.Sprintf("worker %s stopped heartbeating (last heartbeat %s) before it started the run; nothing ran; request again", deref(s.WorkerID), last)
		}
		ok, err := o.Abandon(ctx, tx, &Abandonment{RequestID: s.ID, ExecutionID: s.ExecutionID, Message: msg, Cause: radartype.CauseReap})
		if err != nil {
			return reaped, err
		}
		if ok {
			reaped++
			o.cfg.Instruments.StaleHeartbeatReaped(ctx)
			o.cfg.Logger.WarnContext(ctx, "reaped request of a stale worker",
				slog.Int64("request_id", s.ID), slog.String("job", s.Job), slog.String("worker_id", deref(s.WorkerID)))
		}
	}
	orphans, err := o.queries.JobRequestListOrphaned(ctx, tx, &queries.JobRequestListOrphanedParams{
		Job: jobFilter, StaleSeconds: o.cfg.StaleAfter.Seconds(),
	})
	if err != nil {
		return reaped, fmt.Errorf("error listing orphaned requests: %w", err)
	}
	for _, orphan := range orphans {
		msg := "no worker will run it: its River job ended without running it; request again"
		if orphan.FetchedBy != "" {
			last := "never"
			if orphan.FetchedByHeartbeatAt != nil {
				last = orphan.FetchedByHeartbeatAt.UTC().Format(time.RFC3339)
			}
			msg = fmt.Sprintf("worker %s stopped heartbeating (last heartbeat %s) before it started the run; nothing ran; request again", orphan.FetchedBy, last)
		}
		ok, err := o.Abandon(ctx, tx, &Abandonment{RequestID: orphan.ID, Message: msg})
		if err != nil {
			return reaped, err
		}
		if ok && orphan.FetchedBy != "" {
			// A dead worker's request, found by its River job: counted as
			// the stale reap counts the ones it finds by their worker.
			o.cfg.Instruments.StaleHeartbeatReaped(ctx)
			o.cfg.Logger.WarnContext(ctx, "reaped request of a stale worker",
				slog.Int64("request_id", orphan.ID), slog.String("job", orphan.Job), slog.String("worker_id", orphan.FetchedBy))
		} else if ok {
			o.cfg.Instruments.RequestFailed(ctx, orphan.Job, observability.ReasonOrphaned)
			o.cfg.Logger.WarnContext(ctx, "failed an orphaned request: no worker will run it",
				slog.Int64("request_id", orphan.ID), slog.String("job", orphan.Job), slog.Any("river_job_id", orphan.RiverJobID))
		}
	}
	return reaped, nil
}

// ReapService returns the reaper: a background service that reaps every
// interval, each pass bounded by the stale window, logging failures as one
// line. API processes run it too, so that a fleet with no live worker
// still frees (and shows FAILED) the requests of its dead workers within
// StaleAfter + interval.
func (o *Owner) ReapService(interval time.Duration) *service.Service {
	return service.New(service.Config{Name: "reap", Interval: interval, Timeout: o.cfg.StaleAfter, Logger: o.cfg.Logger, Pass: func(ctx context.Context) error {
		_, err := o.Reap(ctx, "")
		return err
	}})
}

// CleanupPreviousBoots finalizes at once the requests that earlier boots of
// this pid@hostname slot left active: the same slot restarting means those
// boots are dead, whatever their heartbeat says.
func (o *Owner) CleanupPreviousBoots(ctx context.Context, hostname string, pid int, currentID string) (int, error) {
	n := 0
	err := pgtx.InTx(ctx, o.pool, func(tx pgx.Tx) error {
		n = 0
		rows, err := o.queries.JobRequestListPreviousBoot(ctx, tx, &queries.JobRequestListPreviousBootParams{
			SlotPrefix: fmt.Sprintf("%d@%s#%%", pid, hostname), CurrentID: currentID,
		})
		if err != nil {
			return fmt.Errorf("error listing previous boot requests: %w", err)
		}
		for _, row := range rows {
			msg := fmt.Sprintf("worker %s restarted as %s; execution abandoned; a new request resumes from the last commit", deref(row.WorkerID), currentID)
			ok, err := o.Abandon(ctx, tx, &Abandonment{RequestID: row.ID, ExecutionID: row.ExecutionID, Message: msg, Cause: radartype.CauseReap})
			if err != nil {
				return err
			}
			if ok {
				n++
				o.cfg.Instruments.StaleHeartbeatReaped(ctx)
			}
		}
		return nil
	})
	return n, err
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtx"
)

// ScheduleEnqueuer inserts scheduled requests through the same path as the
// API (cleanup, lock, dedupe); *request.Owner implements it.
type ScheduleEnqueuer interface {
	// Validate checks a request's params and estimate, writing nothing.
	Validate(ctx context.Context, db queries.DBTX, p *request.EnqueueParams) (catalog.Definition, *catalog.Params, error)
	// EnqueueTx inserts a request inside tx.
	EnqueueTx(ctx context.Context, tx pgx.Tx, p *request.EnqueueParams) (*request.EnqueueResult, error)
}

// maxMissedPerPass bounds the due times one pass records missed for a job
// (a sub-second schedule after a long outage): the rest are recorded by
// the following passes.
const maxMissedPerPass = 10_000

// SchedulerConfig configures a Scheduler.
type SchedulerConfig struct {
	// Schedules are the scheduled jobs.
	Schedules []Schedule
	// Enqueuer inserts the requests. Required.
	Enqueuer ScheduleEnqueuer
	// Now, when set, replaces the database's clock as the scheduler's
	// clock. Tests move it to make due times come without waiting for them.
	Now func() time.Time
	// ProcessClock is this process's clock (default time.Now). Without Now,
	// a pass decides which due times have come by the database's clock,
	// read at the start of the pass, so every process agrees on them
	// whatever its own clock says; ProcessClock only times the wait until
	// the next due time (with the database's offset from it). Tests skew
	// it.
	ProcessClock func() time.Time
	// Start is when this scheduler started: the first pass to see a job's
	// schedule (or a changed one) records it as the time since when the
	// job has that schedule (job_schedule). Due times before it are neither
	// enqueued nor missed: a new installation does not run yesterday's
	// schedule. Zero is Now() when the Scheduler is made, or without Now
	// the database's clock at the first pass.
	Start time.Time
	// Instruments counts ticks. Required.
	Instruments *observability.Instruments
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Scheduler turns schedules into requests. The state of every schedule is
// in the database (schedule_tick: one row per job and due time), so a pass
// can run on any process, after any other, and any number at once: the
// job's advisory lock and the row's primary key make each due time
// enqueued, coalesced, deferred, missed or failed exactly once. The worker
// runs passes only while it is River's leader, which saves the others the
// work.
//
// A pass, per scheduled job:
//  1. enqueues the oldest deferred due time if the job's request has ended
//     (or coalesces it into a not-yet-started request with the same
//     params);
//  2. handles every due time after the newest recorded one (or, before the
//     first, after the time since when the job has had this schedule, see
//     Start), oldest first:
//     older than the catch-up window → missed (counted, logged once per
//     pass); the job has an active request or older deferred due times →
//     deferred, or coalesced when its params equal those of a deferred due
//     time or of the active request while it is still QUEUED; otherwise
//     enqueued, with the due time on the request.
type Scheduler struct {
	cfg     SchedulerConfig
	pool    *pgxpool.Pool
	queries *queries.Queries
	// dbOffset is the database's clock minus ProcessClock, in nanoseconds,
	// as the latest pass read it.
	dbOffset atomic.Int64
	// startMu guards start, the resolved Start.
	startMu sync.Mutex
	start   time.Time
}

// NewScheduler returns a Scheduler.
func NewScheduler(pool *pgxpool.Pool, cfg SchedulerConfig) (*Scheduler, error) {
	switch {
	case cfg.Enqueuer == nil:
		return nil, errors.New("scheduler: Enqueuer is required")
	case cfg.Instruments == nil:
		return nil, errors.New("scheduler: Instruments is required")
	}
	for _, s := range cfg.Schedules {
		if s.Next == nil || s.Params == nil || s.Period <= 0 {
			return nil, fmt.Errorf("scheduler: schedule of %s needs Next, Params and a positive Period", s.Job)
		}
	}
	if cfg.ProcessClock == nil {
		cfg.ProcessClock = time.Now
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Start.IsZero() && cfg.Now != nil {
		cfg.Start = cfg.Now()
	}
	return &Scheduler{cfg: cfg, pool: pool, queries: queries.New(), start: cfg.Start}, nil
}

// clock returns the scheduler's now: Now when set, otherwise the
// database's clock, whose offset from ProcessClock it keeps for
// UntilNextDue.
func (s *Scheduler) clock(ctx context.Context) (time.Time, error) {
	if s.cfg.Now != nil {
		return s.cfg.Now(), nil
	}
	before := s.cfg.ProcessClock()
	dbNow, err := s.queries.DatabaseNow(ctx, s.pool)
	if err != nil {
		return time.Time{}, fmt.Errorf("error reading the database's clock: %w", err)
	}
	after := s.cfg.ProcessClock()
	s.dbOffset.Store(int64(dbNow.Sub(before.Add(after.Sub(before) / 2))))
	return dbNow, nil
}

// startAt returns Start, set to now by the first pass when it was zero.
func (s *Scheduler) startAt(now time.Time) time.Time {
	s.startMu.Lock()
	defer s.startMu.Unlock()
	if s.start.IsZero() {
		s.start = now
	}
	return s.start
}

// UntilNextDue returns how long, by the scheduler's clock, until the
// earliest next due time of any schedule; ok is false without one.
func (s *Scheduler) UntilNextDue() (d time.Duration, ok bool) {
	now := s.cfg.ProcessClock().Add(time.Duration(s.dbOffset.Load()))
	if s.cfg.Now != nil {
		now = s.cfg.Now()
	}
	var next time.Time
	for _, sched := range s.cfg.Schedules {
		if n := sched.Next.Next(now); !n.IsZero() && (next.IsZero() || n.Before(next)) {
			next = n
		}
	}
	return next.Sub(now), !next.IsZero()
}

// Pass handles every schedule once at the clock's now. Errors of one job
// don't stop the others; they are returned joined (and counted failed).
func (s *Scheduler) Pass(ctx context.Context) error {
	now, err := s.clock(ctx)
	if err != nil {
		return err
	}
	start := s.startAt(now)
	jobs := make([]string, len(s.cfg.Schedules))
	for i := range s.cfg.Schedules {
		jobs[i] = s.cfg.Schedules[i].Job
	}
	states, err := s.queries.ScheduleTickStateByJob(ctx, s.pool, jobs)
	if err != nil {
		return fmt.Errorf("error reading schedule state: %w", err)
	}
	byJob := make(map[string]*queries.ScheduleTickStateByJobRow, len(states))
	for _, st := range states {
		byJob[st.Job] = st
	}
	var errs []error
	for i := range s.cfg.Schedules {
		sched := &s.cfg.Schedules[i]
		// Catch up from the newest recorded due time, but never from
		// before the job had this schedule.
		last, err := s.queries.JobScheduleSince(ctx, s.pool, &queries.JobScheduleSinceParams{Job: sched.Job, Spec: sched.Spec, Since: start})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: error recording schedule: %w", sched.Job, err))
			continue
		}
		if st, ok := byJob[sched.Job]; ok {
			last = maxTime(last, st.LastDueAt)
			if st.Deferred > 0 {
				if err := s.flush(ctx, sched); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", sched.Job, err))
				}
			}
		}
		if err := s.catchUp(ctx, sched, last, now); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", sched.Job, err))
		}
	}
	return errors.Join(errs...)
}

// catchUp handles the due times of sched in (last, now].
func (s *Scheduler) catchUp(ctx context.Context, sched *Schedule, last, now time.Time) error {
	window := sched.catchUpWindow()
	var missed []time.Time
	due := sched.Next.Next(last)
	for ; !due.IsZero() && !due.After(now) && now.Sub(due) > window && len(missed) < maxMissedPerPass; due = sched.Next.Next(due) {
		missed = append(missed, due)
	}
	if len(missed) > 0 {
		if err := s.recordMissed(ctx, sched, missed, window); err != nil {
			return err
		}
		if len(missed) == maxMissedPerPass {
			return nil // the next pass goes on from the newest recorded
		}
	}
	for ; !due.IsZero() && !due.After(now); due = sched.Next.Next(due) {
		if err := s.tick(ctx, sched, due); err != nil {
			// The due time stays unrecorded, and later ones are not
			// handled, so the next pass retries it (while in the window).
			s.cfg.Instruments.ScheduleTick(ctx, sched.Job, observability.TickFailed, 1)
			s.cfg.Logger.WarnContext(ctx, "scheduled due time not enqueued; retried by the next pass",
				slog.String("job", sched.Job), slog.Time("due_at", due), slog.String("error", err.Error()))
			return err
		}
	}
	return nil
}

func (s *Scheduler) recordMissed(ctx context.Context, sched *Schedule, missed []time.Time, window time.Duration) error {
	n, err := s.queries.ScheduleTickInsertMissed(ctx, s.pool, &queries.ScheduleTickInsertMissedParams{
		Job: sched.Job, DueAts: missed, Spec: sched.Spec,
		Message: fmt.Sprintf("older than the catch-up window (%s) when a scheduler first saw it", window),
	})
	if err != nil {
		return fmt.Errorf("error recording missed due times: %w", err)
	}
	if n > 0 {
		s.cfg.Instruments.ScheduleTick(ctx, sched.Job, observability.TickMissed, n)
		s.cfg.Logger.WarnContext(ctx, "scheduled due times missed: older than the catch-up window",
			slog.String("job", sched.Job), slog.Int64("missed", n), slog.Time("oldest", missed[0]),
			slog.Time("newest", missed[len(missed)-1]), slog.Duration("catch_up_window", window))
	}
	return nil
}

// errAlreadyRecorded rolls back a transaction whose due time another
// scheduler recorded meanwhile.
var errAlreadyRecorded = errors.New("due time already recorded")

// tick records one due time and, when the job is free, inserts its request,
// in one transaction under the job's lock.
func (s *Scheduler) tick(ctx context.Context, sched *Schedule, due time.Time) error {
	p := &request.EnqueueParams{
		Job: sched.Job, Params: sched.Params(due), Source: radartype.SourceSchedule, RequestedBy: "schedule", DueAt: &due,
	}
	_, params, err := s.cfg.Enqueuer.Validate(ctx, s.pool, p)
	if isRefusal(err) {
		return s.recordFailed(ctx, sched, due, err)
	}
	if err != nil {
		return err
	}
	p.Params = params.Canonical
	hash := catalog.ParamsHash(params.Canonical)

	var (
		outcome   string
		requestID *int64
	)
	err = pgtx.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		outcome, requestID = "", nil
		if err := s.queries.AdvisoryXactLockJob(ctx, tx, sched.Job); err != nil {
			return fmt.Errorf("error taking job lock: %w", err)
		}
		if _, err := s.queries.ScheduleTickGet(ctx, tx, &queries.ScheduleTickGetParams{Job: sched.Job, DueAt: due}); err == nil {
			return errAlreadyRecorded
		} else if err := queries.Interpret(err); !errors.Is(err, queries.ErrNotFound) {
			return fmt.Errorf("error reading due time: %w", err)
		}
		row := &queries.ScheduleTickInsertParams{Job: sched.Job, DueAt: due, Spec: sched.Spec, Params: params.Canonical, ParamsHash: hash}

		// Deferred due times go first: this one waits behind them, or
		// joins the one with the same params.
		same, err := s.queries.ScheduleTickDeferredByParams(ctx, tx, &queries.ScheduleTickDeferredByParamsParams{Job: sched.Job, ParamsHash: hash})
		switch err := queries.Interpret(err); {
		case err == nil:
			row.Outcome, row.CoalescedInto = observability.TickCoalesced, &same.DueAt
			row.Message = "same params as the deferred due time " + same.DueAt.UTC().Format(time.RFC3339)
			return s.insertTick(ctx, tx, row, &outcome)
		case !errors.Is(err, queries.ErrNotFound):
			return fmt.Errorf("error reading deferred due times: %w", err)
		}
		if _, err := s.queries.ScheduleTickOldestDeferred(ctx, tx, sched.Job); err == nil {
			row.Outcome, row.Message = observability.TickDeferred, "waits behind earlier deferred due times"
			return s.insertTick(ctx, tx, row, &outcome)
		} else if err := queries.Interpret(err); !errors.Is(err, queries.ErrNotFound) {
			return fmt.Errorf("error reading deferred due times: %w", err)
		}

		res, active, err := s.enqueueSavepoint(ctx, tx, p)
		switch {
		case err != nil:
			return err
		case res != nil:
			row.Outcome, row.RequestID = observability.TickEnqueued, &res.Request.ID
			requestID = &res.Request.ID
		case active != nil && active.Status == string(radartype.RequestQueued) && active.ParamsHash == hash:
			row.Outcome, row.RequestID = observability.TickCoalesced, &active.ID
			row.Message = fmt.Sprintf("same params as request %d, not started yet", active.ID)
		default:
			row.Outcome = observability.TickDeferred
			if active != nil {
				row.Message = fmt.Sprintf("waits for request %d to end", active.ID)
			}
		}
		return s.insertTick(ctx, tx, row, &outcome)
	})
	switch {
	case errors.Is(err, errAlreadyRecorded):
		return nil
	case isRefusal(err):
		return s.recordFailed(ctx, sched, due, err)
	case err != nil:
		return err
	}
	s.counted(ctx, sched.Job, outcome, due, requestID)
	return nil
}

// counted counts and logs what became of a due time.
func (s *Scheduler) counted(ctx context.Context, job, outcome string, due time.Time, requestID *int64) {
	s.cfg.Instruments.ScheduleTick(ctx, job, outcome, 1)
	attrs := []any{slog.String("job", job), slog.Time("due_at", due), slog.String("outcome", outcome)}
	if requestID != nil {
		s.cfg.Instruments.RequestRecorded(ctx, job, radartype.SourceSchedule, observability.ResultAccepted)
		attrs = append(attrs, slog.Int64("request_id", *requestID))
	}
	s.cfg.Logger.InfoContext(ctx, "scheduled due time "+outcome, attrs...)
}

func (s *Scheduler) insertTick(ctx context.Context, tx pgx.Tx, row *queries.ScheduleTickInsertParams, outcome *string) error {
	if _, err := s.queries.ScheduleTickInsert(ctx, tx, row); err != nil {
		if errors.Is(queries.Interpret(err), queries.ErrNotFound) {
			return errAlreadyRecorded
		}
		return fmt.Errorf("error recording due time: %w", queries.Interpret(err))
	}
	*outcome = row.Outcome
	return nil
}

// enqueueSavepoint inserts p's request inside a savepoint of tx. When the
// job has an active request it returns that request instead (the savepoint
// rolled back, tx still usable).
func (s *Scheduler) enqueueSavepoint(ctx context.Context, tx pgx.Tx, p *request.EnqueueParams) (*request.EnqueueResult, *queries.JobRequest, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("error creating savepoint: %w", err)
	}
	res, err := s.cfg.Enqueuer.EnqueueTx(ctx, sp, p)
	var dup *request.DuplicateError
	switch {
	case err == nil:
		if err := sp.Commit(ctx); err != nil {
			return nil, nil, fmt.Errorf("error releasing savepoint: %w", err)
		}
		return res, nil, nil
	case errors.As(err, &dup):
		if err := sp.Rollback(ctx); err != nil {
			return nil, nil, fmt.Errorf("error rolling back savepoint: %w", err)
		}
		active, err := s.queries.JobRequestGetByID(ctx, tx, dup.ActiveRequestID)
		if err := queries.Interpret(err); err != nil && !errors.Is(err, queries.ErrNotFound) {
			return nil, nil, fmt.Errorf("error reading active request: %w", err)
		}
		return nil, cmp.Or(active, &queries.JobRequest{ID: dup.ActiveRequestID}), nil
	default:
		_ = sp.Rollback(ctx)
		return nil, nil, err
	}
}

// flush enqueues the job's oldest deferred due time once its active request
// has ended (or coalesces it into a QUEUED request with the same params).
func (s *Scheduler) flush(ctx context.Context, sched *Schedule) error {
	var (
		oldest    *queries.ScheduleTick
		outcome   string
		requestID *int64
	)
	err := pgtx.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		outcome, requestID = "", nil
		if err := s.queries.AdvisoryXactLockJob(ctx, tx, sched.Job); err != nil {
			return fmt.Errorf("error taking job lock: %w", err)
		}
		var err error
		oldest, err = s.queries.ScheduleTickOldestDeferred(ctx, tx, sched.Job)
		if err := queries.Interpret(err); errors.Is(err, queries.ErrNotFound) {
			return nil
		} else if err != nil {
			return fmt.Errorf("error reading deferred due times: %w", err)
		}
		due := oldest.DueAt
		res, active, err := s.enqueueSavepoint(ctx, tx, &request.EnqueueParams{
			Job: sched.Job, Params: oldest.Params, Source: radartype.SourceSchedule, RequestedBy: "schedule", DueAt: &due,
		})
		resolve := &queries.ScheduleTickResolveParams{Job: sched.Job, DueAt: due}
		switch {
		case err != nil:
			return err
		case res != nil:
			resolve.Outcome, resolve.RequestID, resolve.Message = observability.TickEnqueued, &res.Request.ID, "enqueued after the active request ended"
			requestID = &res.Request.ID
		case active.Status == string(radartype.RequestQueued) && active.ParamsHash == oldest.ParamsHash:
			resolve.Outcome, resolve.RequestID = observability.TickCoalesced, &active.ID
			resolve.Message = fmt.Sprintf("same params as request %d, not started yet", active.ID)
		default:
			return nil // still waiting
		}
		if err := s.queries.ScheduleTickResolve(ctx, tx, resolve); err != nil {
			return fmt.Errorf("error recording due time: %w", err)
		}
		outcome = resolve.Outcome
		return nil
	})
	switch {
	case isRefusal(err):
		// Params valid when deferred but refused now (an estimate over
		// today's cap): failed, recorded, not retried.
		cause := err
		err := pgtx.InTx(ctx, s.pool, func(tx pgx.Tx) error {
			return s.queries.ScheduleTickResolve(ctx, tx, &queries.ScheduleTickResolveParams{
				Job: sched.Job, DueAt: oldest.DueAt, Outcome: observability.TickFailed, Message: cause.Error(),
			})
		})
		if err != nil {
			return fmt.Errorf("error recording failed due time: %w", err)
		}
		s.cfg.Instruments.ScheduleTick(ctx, sched.Job, observability.TickFailed, 1)
		s.cfg.Instruments.RequestRecorded(ctx, sched.Job, radartype.SourceSchedule, observability.ResultInvalid)
		s.cfg.Logger.WarnContext(ctx, "deferred due time failed: request refused",
			slog.String("job", sched.Job), slog.Time("due_at", oldest.DueAt), slog.String("error", cause.Error()))
		return nil
	case err != nil:
		s.cfg.Instruments.ScheduleTick(ctx, sched.Job, observability.TickFailed, 1)
		s.cfg.Logger.WarnContext(ctx, "deferred due time not enqueued; retried by the next pass",
			slog.String("job", sched.Job), slog.String("error", err.Error()))
		return err
	case outcome != "":
		s.counted(ctx, sched.Job, outcome, oldest.DueAt, requestID)
	}
	return nil
}

// recordFailed records a due time whose request was refused (params or
// estimate): it would be refused again, so it is not retried.
func (s *Scheduler) recordFailed(ctx context.Context, sched *Schedule, due time.Time, cause error) error {
	_, err := s.queries.ScheduleTickInsert(ctx, s.pool, &queries.ScheduleTickInsertParams{
		Job: sched.Job, DueAt: due, Spec: sched.Spec, Outcome: observability.TickFailed, Message: cause.Error(),
	})
	if err := queries.Interpret(err); errors.Is(err, queries.ErrNotFound) {
		return nil // recorded by another scheduler
	} else if err != nil {
		return fmt.Errorf("error recording failed due time: %w", err)
	}
	s.cfg.Instruments.ScheduleTick(ctx, sched.Job, observability.TickFailed, 1)
	s.cfg.Instruments.RequestRecorded(ctx, sched.Job, radartype.SourceSchedule, observability.ResultInvalid)
	s.cfg.Logger.WarnContext(ctx, "scheduled due time failed: request refused",
		slog.String("job", sched.Job), slog.Time("due_at", due), slog.String("error", cause.Error()))
	return nil
}

// isRefusal reports whether err refuses the request itself (params,
// estimate over a cap, unknown job): trying again would not help.
func isRefusal(err error) bool {
	return catalog.IsParamError(err) || errors.Is(err, request.ErrUnknownJob)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

package worker

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/jobs/riskmetric"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/sql/pgtest"
)

// passClock is the schedules' clock of a pass test (SchedulerConfig.Now):
// due times come when the test moves it, never by waiting.
type passClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *passClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *passClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// newPassWorker returns the part of a Worker that River's scheduler passes
// use: its scheduler of metrics every hour on pool, through the API's
// enqueue, on clock, and its pass settings.
func newPassWorker(t *testing.T, pool *pgxpool.Pool, clock *passClock) *Worker {
	t.Helper()
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	enqueuer, err := request.NewOwner(pool, nil, request.Config{Catalog: catalog.NewCatalog(riskmetric.Spec()), Instruments: instruments, Logger: logger})
	require.NoError(t, err)
	next, err := ParseSchedule("@every 1h", time.UTC)
	require.NoError(t, err)
	def := riskmetric.Spec()
	scheduler, err := NewScheduler(pool, SchedulerConfig{
		Schedules: []Schedule{{
			Job: riskmetric.Name, Spec: "@every 1h", Next: next, Period: time.Hour, CatchUp: 24 * time.Hour,
			Params: func(due time.Time) []byte { return def.ScheduledParams(due) },
		}},
		Enqueuer: enqueuer, Now: clock.Now, Instruments: instruments, Logger: logger,
	})
	require.NoError(t, err)
	return &Worker{
		cfg:       Config{SchedulePassTimeout: 42 * time.Second, SchedulePollInterval: 10 * time.Minute},
		scheduler: scheduler, leading: make(chan struct{}),
	}
}

// count runs a counting query on pool.
func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// A scheduler pass, as River runs it, enqueues each due time that has come
// exactly once: nothing before it, one request when it comes, none more
// from the passes after it, however many run at once; the next due time
// becomes its own tick (here coalesced into the request not started yet,
// which has the same params).
func TestSchedulePass_EnqueuesWhatIsDueOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	clock := &passClock{now: time.Date(2026, 3, 31, 10, 30, 0, 0, time.UTC)}
	pw := &schedulePassWorker{w: newPassWorker(t, pool, clock)}
	require.Equal(t, 42*time.Second, pw.Timeout(nil), "a pass is bounded by SchedulePassTimeout")
	work := func() { require.NoError(t, pw.Work(ctx, &river.Job[schedulePassArgs]{})) }
	requests := func() int {
		return count(t, pool, `SELECT count(*) FROM job_request WHERE job = $1 AND source = 'schedule'`, riskmetric.Name)
	}

	work()
	require.Zero(t, requests(), "nothing is due before 11:00")
	require.Zero(t, count(t, pool, `SELECT count(*) FROM schedule_tick`))

	due := time.Date(2026, 3, 31, 11, 0, 0, 0, time.UTC)
	clock.Set(due.Add(5 * time.Second))
	work()
	work()
	require.Equal(t, 1, requests())
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM job_request WHERE job = $1 AND due_at = $2 AND status = 'QUEUED'`, riskmetric.Name, due))
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM schedule_tick WHERE job = $1 AND due_at = $2 AND outcome = 'enqueued'`, riskmetric.Name, due))

	nextDue := due.Add(time.Hour)
	clock.Set(nextDue.Add(5 * time.Second))
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { work() })
	}
	wg.Wait()
	require.Equal(t, 1, requests(), "the next due time joins the request not started yet")
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM schedule_tick WHERE job = $1 AND due_at = $2 AND outcome = 'coalesced'`, riskmetric.Name, nextDue))
	require.Equal(t, 2, count(t, pool, `SELECT count(*) FROM schedule_tick`))
}

// A pass that fails is River's record of it, named as a scheduler pass.
func TestSchedulePass_FailureIsReturned(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	clock := &passClock{now: time.Date(2026, 3, 31, 11, 0, 5, 0, time.UTC)}
	pw := &schedulePassWorker{w: newPassWorker(t, pool, clock)}
	pool.Close()
	require.ErrorContains(t, pw.Work(context.Background(), &river.Job[schedulePassArgs]{}), "scheduler pass: ")
}

// The pass job's kind, queue and attempts are part of what River stores:
// the kind never changes, passes run on their own queue, and a failed pass
// is not retried (the next one does the same work).
func TestSchedulePass_Args(t *testing.T) {
	t.Parallel()
	require.Equal(t, "buildrisk_schedule_pass", schedulePassArgs{}.Kind())
	opts := schedulePassArgs{}.InsertOpts()
	require.Equal(t, ScheduleQueue, opts.Queue)
	require.Equal(t, 1, opts.MaxAttempts)
}

// River's leader inserts the next pass at the earliest of the next due
// time and SchedulePollInterval, counted from now when River's previous
// run time is past (a late leader runs one pass, not one per missed
// interval), and never at or before the previous run time.
func TestSchedulePass_NextRunTime(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	clock := &passClock{now: time.Date(2026, 3, 31, 11, 0, 5, 0, time.UTC)}
	w := newPassWorker(t, pool, clock)
	sched := passSchedule{w: w, poll: w.cfg.SchedulePollInterval}
	// between checks that next lies in [before+d, after+d], the process's
	// now read around the call.
	between := func(previous time.Time, d time.Duration) time.Time {
		before := time.Now()
		next := sched.Next(previous)
		after := time.Now()
		require.False(t, next.Before(before.Add(d)), "next %s before %s", next, before.Add(d))
		require.False(t, next.After(after.Add(d)), "next %s after %s", next, after.Add(d))
		return next
	}

	// The next due time is 59m55s away: the poll (10 min) comes first,
	// counted from now, not from a previous run time long past.
	between(time.Now().Add(-24*time.Hour), 10*time.Minute)
	// Five minutes before the due time: the due time comes first.
	clock.Set(time.Date(2026, 3, 31, 11, 55, 0, 0, time.UTC))
	between(time.Now().Add(-time.Minute), 5*time.Minute)
	// A previous run time ahead of every candidate: just after it.
	previous := time.Now().Add(time.Hour)
	require.Equal(t, previous.Add(time.Millisecond), sched.Next(previous))
}

// River calls the leader hook on the worker it elected when it starts the
// periodic jobs: Leading is closed from then on, however often it is called.
func TestSchedulePass_LeaderHookClosesLeading(t *testing.T) {
	t.Parallel()
	w := &Worker{leading: make(chan struct{})}
	hook, ok := w.leaderHook().(rivertype.HookPeriodicJobsStart)
	require.True(t, ok)
	select {
	case <-w.Leading():
		t.Fatal("not leading before River says so")
	default:
	}
	for range 2 {
		require.NoError(t, hook.Start(context.Background(), &rivertype.HookPeriodicJobsStartParams{}))
	}
	select {
	case <-w.Leading():
	default:
		t.Fatal("leading once River started the periodic jobs")
	}
}

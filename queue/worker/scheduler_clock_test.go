package worker_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/jobs/riskmetric"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/sql/pgtest"
)

// A scheduler decides which due times have come by the database's clock,
// not its process's: a process whose clock runs 36 h ahead enqueues no due
// time from the database's future, and one 36 h behind still handles the
// due times that have come. Both record exactly the hourly due times in
// (start, database now].
func TestScheduler_DueTimesByTheDatabaseClock(t *testing.T) {
	t.Parallel()
	for _, skew := range []time.Duration{36 * time.Hour, -36 * time.Hour} {
		t.Run(skew.String(), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			ctx := context.Background()
			var dbNow time.Time
			require.NoError(t, pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&dbNow))
			// Three hours back: three hourly due times have come.
			start := dbNow.Add(-3 * time.Hour).Truncate(time.Hour).Add(time.Minute)

			sched := newScheduler(t, pool, start, func() time.Time { return time.Now().Add(skew) })
			require.NoError(t, sched.Pass(ctx))
			var after time.Time
			require.NoError(t, pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&after))

			var dueAts []time.Time
			rows, err := pool.Query(ctx, `SELECT due_at FROM schedule_tick WHERE job = $1 ORDER BY due_at`, riskmetric.Name)
			require.NoError(t, err)
			for rows.Next() {
				var due time.Time
				require.NoError(t, rows.Scan(&due))
				dueAts = append(dueAts, due)
			}
			require.NoError(t, rows.Err())
			// Every due time up to the database's now before the pass, and
			// none after its now once the pass ended (a due time may come
			// while the pass runs).
			var want []time.Time
			for due := start.Truncate(time.Hour).Add(time.Hour); !due.After(after); due = due.Add(time.Hour) {
				want = append(want, due)
			}
			require.GreaterOrEqual(t, len(dueAts), 3, "due times recorded: %v, want %v", dueAts, want)
			require.LessOrEqual(t, len(dueAts), len(want), "due times recorded: %v, want %v", dueAts, want)
			for i := range dueAts {
				require.True(t, want[i].Equal(dueAts[i]), "due time %d: %s, want %s", i, dueAts[i], want[i])
			}
		})
	}
}

// newScheduler returns a scheduler of metrics every hour on pool, through
// the API's enqueue, with processClock as its process's clock.
func newScheduler(t *testing.T, pool *pgxpool.Pool, start time.Time, processClock func() time.Time) *worker.Scheduler {
	t.Helper()
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	enqueuer, err := request.NewOwner(pool, nil, request.Config{Catalog: catalog.NewCatalog(riskmetric.Spec()), Instruments: instruments, Logger: logger})
	require.NoError(t, err)
	next, err := worker.ParseSchedule("@every 1h", time.UTC)
	require.NoError(t, err)
	def := riskmetric.Spec()
	sched, err := worker.NewScheduler(pool, worker.SchedulerConfig{
		Schedules: []worker.Schedule{{
			Job: riskmetric.Name, Spec: "@every 1h", Next: next, Period: time.Hour, CatchUp: 24 * time.Hour,
			Params: func(due time.Time) []byte { return def.ScheduledParams(due) },
		}},
		Enqueuer: enqueuer, ProcessClock: processClock, Start: start, Instruments: instruments, Logger: logger,
	})
	require.NoError(t, err)
	return sched
}

package credit_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// dbJob is a job that works the database only: each chunk reads, then
// writes in its checkpoint transaction. Its first chunk waits for release.
type dbJob struct {
	chunks  int
	release chan struct{}
}

func (j *dbJob) Plan(context.Context, *batch.Run) (*batch.Plan, error) {
	plan := &batch.Plan{Targets: int64(j.chunks)}
	for i := range j.chunks {
		plan.Chunks = append(plan.Chunks, fmt.Sprintf("c%03d", i))
	}
	return plan, nil
}

func (j *dbJob) Process(ctx context.Context, run *batch.Run, chunk string) (*batch.ChunkResult, error) {
	if chunk == "c000" {
		select {
		case <-j.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var n int64
	if err := run.DB.QueryRow(ctx, `SELECT count(*) FROM exposure`).Scan(&n); err != nil {
		return nil, err
	}
	return &batch.ChunkResult{Targets: 1, Written: 1, Write: func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT pg_sleep(0.002)`)
		return err
	}}, nil
}

// Connection discipline (a request that needs a second connection while it
// holds one can deadlock a small pool against itself): a database
// pool of 4 connections, a fan-out of 16 against a slow upstream, and two
// other jobs running at the same time. Nothing waits forever for a
// connection, everything completes, and the pool never shows more than 4
// acquired — the calls in flight hold none.
func TestCreditEval_SmallDatabasePool(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Fake: fakeupstream.Config{Latency: 20 * time.Millisecond, EmptyRate: 0.05}})
	targets := s.SeedCreditTargets()

	cfg, err := pgxpool.ParseConfig(s.DBURL)
	require.NoError(t, err)
	cfg.MaxConns = 4
	pool4, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool4.Close)
	third := &dbJob{chunks: 150, release: make(chan struct{})}
	s.StartWorkerWith(pool4, func(_ *worker.Config, rc *batch.Config) {
		rc.FanOut = 16
		rc.Jobs[riskrule.Name] = third // a third job, database only
	})

	// Sample the pool (and the fan-out gauge) for the whole run.
	var maxAcquired, maxInflight atomic.Int64
	raise := func(v *atomic.Int64, n int64) {
		for cur := v.Load(); n > cur && !v.CompareAndSwap(cur, n); cur = v.Load() {
		}
	}
	stopSampling := make(chan struct{})
	var sampling sync.WaitGroup
	sampling.Go(func() {
		ticker := time.NewTicker(time.Millisecond)
		defer ticker.Stop()
		for i := 0; ; i++ {
			select {
			case <-stopSampling:
				return
			case <-ticker.C:
			}
			raise(&maxAcquired, int64(pool4.Stat().AcquiredConns()))
			if i%10 == 0 {
				v, err := observabilitytest.MetricValue(s.Tel.Providers, observability.MetricFanoutInflight, map[string]string{"job": credit.Name})
				if err == nil {
					raise(&maxInflight, int64(v))
				}
			}
		}
	})
	t.Cleanup(func() { close(stopSampling); sampling.Wait() })

	// Hold every provider call until the three jobs run at once.
	s.Gate.Arm(0)
	creditEval := s.RequestCreditEval(`{}`)["requestId"].(string)
	apt := s.RequestAptTrade(apptest.AptTradeBody(apptest.SixRegions[:4], "2025-01", "2025-06"))
	status, out := s.Post("/v1/jobs/rules/requests", `{"params":{}}`)
	require.Equal(t, 202, status, "%v", out)
	rules := out["requestId"].(string)
	for _, id := range []string{creditEval, apt, rules} {
		s.WaitRequest(id, "RUNNING")
	}
	apptest.Within(t, time.Minute, s.Gate.Blocked, "a held provider call")
	deadline := time.Now().Add(30 * time.Second)
	for {
		v := s.Metric(observability.MetricFanoutInflight, map[string]string{"job": credit.Name})
		if v == 16 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the fan-out never filled its 16 slots (%v)", v)
		time.Sleep(5 * time.Millisecond)
	}
	// 16 credit calls and an aptTrade call are in flight: they hold no
	// connection, so the pool still has one free.
	idle := pool4.Stat()
	require.Less(t, idle.AcquiredConns(), int32(4), "calls in flight hold no database connection")

	close(third.release)
	s.Gate.Open()
	for _, id := range []string{creditEval, apt, rules} {
		done := s.WaitRequest(id, "DONE", "FAILED")
		require.Equal(t, "COMPLETED", apptest.Execution(t, done)["status"], "%v", done)
	}
	exec := apptest.Execution(t, s.WaitRequest(creditEval, "DONE"))
	require.Equal(t, float64(len(targets)), exec["itemsWritten"])
	require.Equal(t, exec["itemsWritten"], exec["domainRows"])
	require.Zero(t, s.Metric(observability.MetricFanoutRejections, map[string]string{"job": credit.Name}))

	require.Equal(t, int32(4), pool4.Stat().MaxConns())
	require.LessOrEqual(t, maxAcquired.Load(), int64(4), "never more than 4 connections acquired")
	// A sampler can miss a peak but never invents one: it bounds from above
	// only. That 16 calls ran at once on 4 connections was shown by the
	// event above (the gauge reached 16 while the calls were held).
	require.LessOrEqual(t, maxInflight.Load(), int64(16), "the fan-out never exceeded its 16 slots")
	t.Logf("pool of 4: at most %d acquired; fan-out peak %d in flight; %d waited for a connection (EmptyAcquireCount)",
		maxAcquired.Load(), maxInflight.Load(), pool4.Stat().EmptyAcquireCount())
}

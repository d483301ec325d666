package batch_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtest"
	"github.com/buildrisk/radar/upstream"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// chunkKeys returns the keys c00, c01, ... of n chunks.
func chunkKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("c%02d", i)
	}
	return keys
}

type noParams struct{}

// itemsJob has `chunks` chunks of `perChunk` targets each; lose drops items
// from each chunk's accounting (a silent loss: nothing says they failed).
type itemsJob struct {
	chunks, perChunk int64
	lose             int64
	declare          bool
}

func (j *itemsJob) Plan(context.Context, *batch.Run) (*batch.Plan, error) {
	plan := &batch.Plan{Targets: batch.TargetsUnknown}
	if j.declare {
		plan.Targets = j.chunks * j.perChunk
	}
	plan.Chunks = chunkKeys(int(j.chunks))
	return plan, nil
}

func (j *itemsJob) Process(context.Context, *batch.Run, string) (*batch.ChunkResult, error) {
	targets := j.perChunk
	if !j.declare {
		return &batch.ChunkResult{Targets: targets, Written: targets - j.lose}, nil
	}
	return &batch.ChunkResult{Targets: targets - j.lose, Written: targets - j.lose}, nil
}

type testBundle struct {
	pool        *pgxpool.Pool
	providers   *observability.Providers
	instruments *observability.Instruments
	upstream    *upstream.Client
	enqueuer    *request.Owner
	runner      *batch.Runner
}

// setup builds a runner of registry's jobs on a database of its own;
// configure, when given, changes its config.
func setup(t *testing.T, registry map[string]batch.Job, configure ...func(*batch.Config)) *testBundle {
	t.Helper()
	pool := pgtest.NewPool(t)
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	// The catalog knows the registry's jobs, metrics chaining to rules as
	// in production (rules known whether registered or not).
	var defs []catalog.Definition
	for name := range registry {
		if name != "metrics" && name != "rules" {
			defs = append(defs, &catalog.Spec[noParams]{JobName: name, Desc: "test job"})
		}
	}
	defs = append(defs, &catalog.Spec[noParams]{JobName: "metrics", Desc: "test job", NextJob: "rules"}, &catalog.Spec[noParams]{JobName: "rules", Desc: "test job"})
	enqueuer, err := request.NewOwner(pool, nil, request.Config{Catalog: catalog.NewCatalog(defs...), Instruments: instruments})
	require.NoError(t, err)
	up, err := upstream.NewClient(pool, upstream.ClientConfig{Instruments: instruments})
	require.NoError(t, err)
	cfg := batch.Config{WorkerID: "1@test#boot", Jobs: registry, Upstream: up, Instruments: instruments, Owner: enqueuer}
	for _, c := range configure {
		c(&cfg)
	}
	runner, err := batch.NewRunner(pool, cfg)
	require.NoError(t, err)
	return &testBundle{pool: pool, providers: providers, instruments: instruments, upstream: up, enqueuer: enqueuer, runner: runner}
}

func (b *testBundle) enqueue(t *testing.T, job string) int64 {
	t.Helper()
	res, err := b.enqueuer.Enqueue(context.Background(), &request.EnqueueParams{Job: job, Source: radartype.SourceCLI, Params: []byte("{}")})
	require.NoError(t, err)
	return res.Request.ID
}

// JobRequestQueueIT: two different jobs started at the same instant both
// run, every time (5 repetitions).
func TestRunner_DifferentJobsStartTogether(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]batch.Job{
		"filingParse": &itemsJob{chunks: 3, perChunk: 2},
		"stockPrice":  &itemsJob{chunks: 3, perChunk: 2},
	})
	for rep := range 5 {
		ids := []int64{b.enqueue(t, "filingParse"), b.enqueue(t, "stockPrice")}
		start := make(chan struct{})
		outcomes := make([]*batch.Outcome, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				outcomes[i], errs[i] = b.runner.Run(context.Background(), batch.RunOpts{RequestID: id})
			}()
		}
		close(start)
		wg.Wait()
		for i := range ids {
			require.NoError(t, errs[i], "rep %d", rep)
			require.Equal(t, radartype.ExecutionCompleted, outcomes[i].Status, "rep %d: %s", rep, outcomes[i].Message)
		}
	}
}

// No silent success: an execution whose items do not add up to its targets
// ends FAILED with "unaccounted", and the counter moves.
func TestRunner_UnaccountedItemsFail(t *testing.T) {
	t.Parallel()
	for _, declare := range []bool{false, true} {
		t.Run(fmt.Sprintf("DeclaredTargets_%v", declare), func(t *testing.T) {
			t.Parallel()
			b := setup(t, map[string]batch.Job{"creditEval": &itemsJob{chunks: 4, perChunk: 10, lose: 1, declare: declare}})
			out, err := b.runner.Run(context.Background(), batch.RunOpts{RequestID: b.enqueue(t, "creditEval")})
			require.NoError(t, err)
			require.Equal(t, radartype.ExecutionFailed, out.Status)
			// Undeclared targets: the first chunk that loses an item fails
			// at its commit. Declared: every chunk adds up, the instance's
			// total does not.
			want, lost := "chunk c00: unaccounted: 1 of 10", float64(1)
			if declare {
				want, lost = "unaccounted: 4 of 40", 4
			}
			require.Contains(t, out.Message, want)
			require.Equal(t, radartype.RequestFailed, out.RequestStatus)
			v, err := observabilitytest.MetricValue(b.providers, "buildrisk_items_total", map[string]string{"job": "creditEval", "outcome": "unaccounted"})
			require.NoError(t, err)
			require.Equal(t, lost, v, "each lost item counted once")
		})
	}
	t.Run("Control_AllAccounted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, map[string]batch.Job{"creditEval": &itemsJob{chunks: 4, perChunk: 10, declare: true}})
		out, err := b.runner.Run(context.Background(), batch.RunOpts{RequestID: b.enqueue(t, "creditEval")})
		require.NoError(t, err)
		require.Equal(t, radartype.ExecutionCompleted, out.Status, out.Message)
	})
}

// A request that is no longer QUEUED (reaped meanwhile) is not run.
func TestRunner_NotQueued(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]batch.Job{"metrics": &itemsJob{chunks: 1, perChunk: 1}})
	id := b.enqueue(t, "metrics")
	testfactory.FinishRequest(context.Background(), t, b.pool, id, radartype.RequestFailed, "reaped")
	_, err := b.runner.Run(context.Background(), batch.RunOpts{RequestID: id})
	require.ErrorIs(t, err, batch.ErrNotQueued)
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT count(*) FROM job_execution").Scan(&n))
	require.Equal(t, 0, n)
}

// lockWaiters returns the starts of the transactions waiting for an
// advisory lock in the pool's database.
func lockWaiters(ctx context.Context, pool *pgxpool.Pool) ([]time.Time, error) {
	rows, err := pool.Query(ctx, `SELECT xact_start FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[time.Time])
}

// A completion and the request it chains to commit together: while the
// chained request's insert cannot commit (another transaction holds the
// next job's lock past the recording's DB timeout, so its attempts roll
// back), the execution is not COMPLETED either, and recording retries
// until both commit.
func TestRunner_ChainCommitsWithCompletion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, map[string]batch.Job{"metrics": &itemsJob{chunks: 2, perChunk: 1}}, func(c *batch.Config) {
		c.DBTimeout = 300 * time.Millisecond
	})
	// The next job's lock, as an enqueue of rules elsewhere holds it.
	holder, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	require.NoError(t, queries.New().AdvisoryXactLockJob(ctx, holder, "rules"))

	id := b.enqueue(t, "metrics")
	wait := runAsync(t, b.runner, id)
	// attempts are the recording transactions seen waiting for the lock,
	// by their start: two distinct ones prove a rolled-back attempt.
	attempts := map[time.Time]bool{}
	var completedSeen bool
	var pollErr error
	require.Eventually(t, func() bool {
		var waiting []time.Time
		if waiting, pollErr = lockWaiters(ctx, b.pool); pollErr != nil {
			return true
		}
		for _, started := range waiting {
			attempts[started] = true
		}
		var status string
		if pollErr = b.pool.QueryRow(ctx, "SELECT coalesce((SELECT status FROM job_execution WHERE request_id = $1), '')", id).Scan(&status); pollErr != nil {
			return true
		}
		completedSeen = completedSeen || status == "COMPLETED"
		return completedSeen || len(attempts) >= 2
	}, time.Minute, 20*time.Millisecond, "the recording never waited for the next job's lock twice")
	require.NoError(t, pollErr)
	require.False(t, completedSeen, "another connection never sees the completion before its chained request")
	require.NoError(t, holder.Rollback(ctx))

	out, err := wait()
	require.NoError(t, err)
	require.Equal(t, radartype.ExecutionCompleted, out.Status)
	var rules int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM job_request WHERE job = 'rules' AND source = 'chain'").Scan(&rules))
	require.Equal(t, 1, rules)
}

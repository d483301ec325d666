package credit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// A run over more targets than a chunk reads them a chunk at a time from its
// frozen plan: stopped in the middle (maxCalls) and resumed, every target is
// called exactly once. During the resume the ledger changes after its first
// chunk: a company added in a range not yet evaluated waits for the next
// run, a target whose exposure was repaid is still evaluated (the plan is
// what the run declared), and the run completes with the targets it
// declared at its start.
func TestCreditEval_PagedTargetsOnceEachAcrossStopAndLedgerChange(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{targets: 2500, fanOut: 4})
	require.Greater(t, len(b.targets), 2*testChunkSize)

	maxCalls := 1300 // the first chunk and part of the second
	out, first := b.run(t, `{}`, &maxCalls)
	require.Equal(t, radartype.ExecutionStopped, out.Status, out.Message)
	require.Equal(t, int32(3), first.ChunksTotal)
	paid := len(b.fake.Stats().Calls[fakeupstream.EndpointCreditLookup])
	require.Less(t, paid, len(b.targets))

	// The resume's chunks, in order: the change lands after the first.
	n, err := strconv.Atoi(b.targets[len(b.targets)-3])
	require.NoError(t, err)
	added := fmt.Sprintf("%08d", n+1) // inside the last chunk's range, not a target
	require.NotContains(t, b.targets, added)
	require.Less(t, added, b.targets[len(b.targets)-2])
	repaid := b.targets[len(b.targets)-2] // in the last chunk
	changed := false
	id, _ := b.request(t, `{}`, nil)
	out, err = b.runner.Run(context.Background(), batch.RunOpts{RequestID: id, OnChunk: func(done, _ int) {
		if changed {
			return
		}
		changed = true
		_, err := queries.New().ExposureUpsert(context.Background(), b.pool, &queries.ExposureUpsertParams{
			CorpCodes: []string{added, repaid}, OutstandingKrws: []int64{7, 0},
		})
		require.NoError(t, err)
	}})
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, radartype.ExecutionCompleted, out.Status, out.Message)
	exec, err := queries.New().JobExecutionGetByID(context.Background(), b.pool, out.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, int64(len(b.targets)), exec.Targets, "declared at the start: the ledger's change does not move it")

	lookups := b.fake.Stats().Calls[fakeupstream.EndpointCreditLookup]
	require.Len(t, lookups, len(b.targets), "every target called, across the stop")
	for _, code := range b.targets {
		require.Equal(t, int64(1), lookups[code], "%s called once", code)
	}
	require.NotContains(t, lookups, added, "added during the run: waits for the next run")
	b.requireOneGradeEach(t, b.today(), b.targets)
}

// Planning holds no target list in the worker: the bytes Plan allocates do
// not grow with the ledger (the old plan read every target into memory:
// about 200 bytes a target).
func TestCreditEval_PlanMemoryFlat(t *testing.T) {
	small := planAllocs(t, 2_000)
	big := planAllocs(t, 20_000)
	perTarget := float64(big-small) / 18_000
	t.Logf("Plan allocated %d bytes at 2,000 targets, %d at 20,000: %.1f bytes per extra target", small, big, perTarget)
	require.Less(t, perTarget, 4.0, "Plan's memory grows with the targets")
}

// planAllocs returns the bytes creditEval's Plan allocates over a ledger of
// n targets (the smallest of three runs).
func planAllocs(t *testing.T, n int) uint64 {
	t.Helper()
	b := setup(t, setupOpts{targets: n})
	job := credit.NewSized(testChunkSize)
	run := &batch.Run{
		DB: batch.NewReader(b.pool), Job: credit.Name, ExecutionID: 1, InstanceID: 1, Params: json.RawMessage(`{}`),
		Calls: b.client.NewCaller(credit.Name, 0),
	}
	least := ^uint64(0)
	for range 3 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		plan, err := job.Plan(context.Background(), run)
		runtime.ReadMemStats(&after)
		require.NoError(t, err)
		require.Equal(t, int64(n), plan.Targets)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// Planning reads each target once, in key order, even when the ledger has
// just been loaded and has no statistics yet (autovacuum has not analyzed
// it, and the application's roles may not). Without statistics the planner
// guessed a few thousand targets and sorted, for every page, every target
// after the page: 5,000 targets in pages of 1,000 read 15,000 index
// entries, and 400,000 would read 80 million.
func TestCreditEval_PlanReadsEachTargetOnceWithoutStatistics(t *testing.T) {
	t.Parallel()
	const n = 5 * testChunkSize
	b := setup(t, setupOpts{targets: n})
	ctx := context.Background()
	var analyzed bool
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL FROM pg_stat_user_tables WHERE relname = 'exposure'`).Scan(&analyzed))
	require.False(t, analyzed, "the ledger was just loaded: no statistics yet")
	// Index entries and heap rows read from exposure so far. A backend
	// reports its reads when its transaction has ended, within a second.
	read := func() int64 {
		var n int64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT (SELECT coalesce(sum(idx_tup_read), 0) FROM pg_stat_user_indexes WHERE relname = 'exposure')
			+ (SELECT coalesce(seq_tup_read, 0) FROM pg_stat_user_tables WHERE relname = 'exposure')`).Scan(&n))
		return n
	}
	before := read()
	run := &batch.Run{
		DB: batch.NewReader(b.pool), Job: credit.Name, ExecutionID: 1, InstanceID: 1, Params: json.RawMessage(`{}`),
		Calls: b.client.NewCaller(credit.Name, 0),
	}
	plan, err := credit.NewSized(testChunkSize).Plan(ctx, run)
	require.NoError(t, err)
	require.Equal(t, int64(n), plan.Targets)
	var reads int64
	deadline := time.Now().Add(30 * time.Second)
	for reads = read() - before; reads < n; reads = read() - before {
		require.True(t, time.Now().Before(deadline), "the plan's reads never reached the statistics (%d of at least %d)", reads, n)
		time.Sleep(50 * time.Millisecond)
	}
	require.LessOrEqual(t, reads, int64(n+n/2), "exposure rows read to plan %d targets in pages of %d", n, testChunkSize)
}

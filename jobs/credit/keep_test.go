package credit_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// newRunner returns a second runner on b's database and upstream: a drained
// runner stays drained, so a resume needs another one (another process).
func (b *testBundle) newRunner(tb testing.TB, fanOut int) *batch.Runner {
	tb.Helper()
	runner, err := batch.NewRunner(b.pool, batch.Config{Owner: b.enqueuer,
		WorkerID: "2@test#boot", Jobs: map[string]batch.Job{credit.Name: credit.New()},
		Upstream: b.client, Instruments: b.instruments, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), FanOut: fanOut,
	})
	require.NoError(tb, err)
	return runner
}

// graded returns the corp codes with a grade for day.
func (b *testBundle) graded(tb testing.TB, day time.Time) map[string]bool {
	tb.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT corp_code FROM credit_grade WHERE eval_date = $1`, day)
	require.NoError(tb, err)
	codes := map[string]bool{}
	for rows.Next() {
		var code string
		require.NoError(tb, rows.Scan(&code))
		codes[code] = true
	}
	require.NoError(tb, rows.Err())
	return codes
}

// waitGraded polls until at least n grades are committed for day; the
// deadline fails the test.
func (b *testBundle) waitGraded(tb testing.TB, day time.Time, n int) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for b.count(tb, `SELECT count(*) FROM credit_grade WHERE eval_date = $1`, day) < n {
		require.True(tb, time.Now().Before(deadline), "fewer than %d grades committed in 30s", n)
		time.Sleep(5 * time.Millisecond)
	}
}

// requireResumeCallsOnlyTheRest runs a resume with a fresh runner and checks
// that it calls exactly the targets without a committed grade, once each,
// and completes with every target graded once.
func (b *testBundle) requireResumeCallsOnlyTheRest(tb testing.TB, kept map[string]bool) *queries.JobExecution {
	tb.Helper()
	cfg := b.fake.Config()
	cfg.Latency, cfg.ErrorRate = 0, 0
	b.fake.SetConfig(cfg)
	b.fake.Reset()
	id, _ := b.request(tb, `{}`, nil)
	out, err := b.newRunner(tb, 8).Run(context.Background(), batch.RunOpts{RequestID: id})
	require.NoError(tb, err)
	require.Equal(tb, radartype.ExecutionCompleted, out.Status, out.Message)
	lookups := b.fake.Stats().Calls[fakeupstream.EndpointCreditLookup]
	require.Len(tb, lookups, len(b.targets)-len(kept), "only the targets without a committed grade are called")
	for code, n := range lookups {
		require.False(tb, kept[code], "%s: its grade was committed, yet called again", code)
		require.Equal(tb, int64(1), n, code)
	}
	b.requireOneGradeEach(tb, b.today(), b.targets)
	exec, err := queries.New().JobExecutionGetByID(context.Background(), b.pool, out.ExecutionID)
	require.NoError(tb, err)
	require.Equal(tb, int64(len(b.targets)), exec.Targets)
	require.Equal(tb, int64(len(b.targets)-len(kept)), exec.ItemsWritten)
	require.Equal(tb, int64(len(b.targets)), *exec.DomainRows)
	return exec
}

// creditEval with errorRate 0.3: its one 1,000-target chunk fails its
// tolerance (about 27 targets still fail after three attempts, 10 are
// tolerated): it stops handing over targets as soon as the 11th fails. The
// good grades are kept, the failed targets are counted —
// items_total{outcome="failed"} equals them — and the resume calls only
// the failed targets.
func TestCreditEval_ToleranceFailureKeepsGoodGrades(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{targets: 1000, fanOut: 8, fake: fakeupstream.Config{ErrorRate: 0.3}})

	out, exec := b.run(t, `{}`, nil)
	require.Equal(t, radartype.ExecutionFailed, out.Status, out.Message)
	require.Contains(t, out.Message, "of 1000 targets failed, more than the 10 tolerated")
	kept := b.graded(t, b.today())
	require.Positive(t, exec.ItemsFailed)
	require.Greater(t, exec.ItemsFailed, credit.FailureTolerance(1000))
	require.Equal(t, int64(len(kept)), exec.ItemsWritten, "the good grades are committed")
	require.Less(t, exec.ItemsWritten+exec.ItemsFailed, int64(1000),
		"the fan-out stopped once the tolerance was exceeded: the targets never called stay for the resume")
	require.Equal(t, float64(exec.ItemsFailed), b.metric(t, observability.MetricItems, map[string]string{"job": credit.Name, "outcome": observability.OutcomeFailed}),
		"items_total{outcome=failed} equals the failed targets")
	require.Equal(t, float64(len(kept)), b.metric(t, observability.MetricItems, map[string]string{"job": credit.Name, "outcome": observability.OutcomeWritten}))

	b.requireResumeCallsOnlyTheRest(t, kept)
}

// A provider answering garbage (200, no grade to parse) with a tolerance of
// 6 failed targets: the fan-out stops handing over as soon as the 7th
// target fails, so the run costs about tolerance + FANOUT calls (the 7th
// failure and the calls in flight beside it), not one per target (600 of
// 600 when the tolerance was checked at the end of the chunk). The targets
// never called stay for the resume.
func TestCreditEval_ToleranceStopsTheCalls(t *testing.T) {
	t.Parallel()
	const fanOut = 5
	b := setup(t, setupOpts{targets: 600, fanOut: fanOut, fake: fakeupstream.Config{GarbageRate: 1}})
	tolerance := credit.FailureTolerance(600)
	require.Equal(t, int64(6), tolerance)

	out, exec := b.run(t, `{}`, nil)
	require.Equal(t, radartype.ExecutionFailed, out.Status, out.Message)
	require.Contains(t, out.Message, "of 600 targets failed, more than the 6 tolerated")
	calls := b.fake.Stats().Total
	require.LessOrEqual(t, calls, tolerance+1+2*fanOut, "stopped calling once the tolerance was exceeded")
	require.Greater(t, calls, tolerance, "the 7th failure is what stops it")
	require.Equal(t, int64(exec.ExternalCalls), calls)
	require.Equal(t, calls, exec.ItemsFailed, "one call per target, each failed and counted")
	require.Zero(t, exec.ItemsWritten)
}

// A drain in the middle of a 1,000-item chunk at 250 ms a call: the
// fan-out stops handing out items, waits for the calls in flight and
// commits them. No call starts after the drain beyond the FANOUT already
// handed out, every call made is committed, and the resume calls none of
// them again.
func TestCreditEval_DrainMidChunkKeepsFinishedItems(t *testing.T) {
	t.Parallel()
	const fanOut = 5
	b := setup(t, setupOpts{targets: 1000, fanOut: fanOut, fake: fakeupstream.Config{Latency: 250 * time.Millisecond}})
	id, _ := b.request(t, `{}`, nil)
	type result struct {
		out *batch.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := b.runner.Run(context.Background(), batch.RunOpts{RequestID: id})
		done <- result{out, err}
	}()
	b.waitGraded(t, b.today(), 2*fanOut) // mid-chunk: two rounds committed

	callsAtDrain := b.fake.Stats().Total
	drainedAt := time.Now()
	b.runner.Drain()
	var res result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the drained run did not end within 30s")
	}
	t.Logf("drain to exit: %v (one call is 250ms)", time.Since(drainedAt))
	require.NoError(t, res.err)
	require.Equal(t, radartype.ExecutionStopped, res.out.Status, res.out.Message)
	require.Equal(t, batch.MessageDrainedInChunk, res.out.Message)

	calls := b.fake.Stats().Calls[fakeupstream.EndpointCreditLookup]
	require.LessOrEqual(t, b.fake.Stats().Total-callsAtDrain, int64(fanOut), "only the calls already handed out ran after the drain")
	kept := b.graded(t, b.today())
	require.Less(t, len(kept), 1000, "the drain stopped the chunk")
	require.Len(t, kept, len(calls), "every call made was committed, those in flight at the drain included")
	for code := range calls {
		require.True(t, kept[code], "%s was called but its grade not committed", code)
	}
	exec, err := queries.New().JobExecutionGetByID(context.Background(), b.pool, res.out.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, int64(len(kept)), exec.ItemsWritten)
	require.Zero(t, exec.ChunksDone, "the chunk itself did not complete")

	b.requireResumeCallsOnlyTheRest(t, kept)
}

// A stop request reaches a fan-out chunk at its next part commit: it stops
// handing out items, keeps the finished ones, and the resume calls only the
// rest.
func TestCreditEval_StopMidChunkKeepsFinishedItems(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{targets: 1000, fanOut: 4, fake: fakeupstream.Config{Latency: 20 * time.Millisecond}})
	id, _ := b.request(t, `{}`, nil)
	type result struct {
		out *batch.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := b.runner.Run(context.Background(), batch.RunOpts{RequestID: id})
		done <- result{out, err}
	}()
	b.waitGraded(t, b.today(), 8)
	_, err := queries.New().JobExecutionRequestStop(context.Background(), b.pool, credit.Name)
	require.NoError(t, err)
	var res result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the stopped run did not end within 30s")
	}
	require.NoError(t, res.err)
	require.Equal(t, radartype.ExecutionStopped, res.out.Status, res.out.Message)
	require.Equal(t, batch.MessageStopRequestedInChunk, res.out.Message)
	kept := b.graded(t, b.today())
	require.Less(t, len(kept), 1000, "the stop ended the chunk")
	require.Len(t, b.fake.Stats().Calls[fakeupstream.EndpointCreditLookup], len(kept), "every call made was committed")

	b.requireResumeCallsOnlyTheRest(t, kept)
}

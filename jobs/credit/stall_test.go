package credit_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// A 30 s lock on job_execution in the middle of a run (a migration's lock
// queue, an operator's LOCK TABLE) while the worker's heartbeats go on:
// every part commit waits for it, past its statement timeout again and
// again, with the answers it paid for in hand. No answer is bought again
// beyond the bound of 2 × FANOUT (before, the runner re-ran the chunk on
// each timed-out part and bought about 80 lookups again for a 30 s lock),
// and the run completes once the lock is gone.
func TestCreditEval_LockedExecutionTableRepeatsNoPaidCall(t *testing.T) {
	t.Parallel()
	const fanOut = 5
	b := setup(t, setupOpts{targets: 3000, fanOut: fanOut, fake: fakeupstream.Config{Latency: 50 * time.Millisecond}})
	ctx := context.Background()
	// The worker's pool as production opens it: every statement bounded by
	// the DB timeout (5 s), a lock wait included.
	poolCfg := b.pool.Config().Copy()
	poolCfg.ConnConfig.RuntimeParams["statement_timeout"] = "5000"
	workerPool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	require.NoError(t, err)
	defer workerPool.Close()
	runner, err := batch.NewRunner(workerPool, batch.Config{Owner: b.enqueuer,
		WorkerID: "1@test#boot", Jobs: map[string]batch.Job{credit.Name: credit.NewSized(testChunkSize)},
		Upstream: b.client, Instruments: b.instruments, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), FanOut: fanOut,
	})
	require.NoError(t, err)
	id, _ := b.request(t, `{}`, nil)
	type result struct {
		out *batch.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := runner.Run(ctx, batch.RunOpts{RequestID: id})
		done <- result{out, err}
	}()
	b.waitGraded(t, b.today(), 4*fanOut)

	// The fault: a transaction holding job_execution for 30 s.
	conn, err := b.pool.Acquire(ctx) // no statement_timeout: the fault's own session
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `LOCK TABLE job_execution IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	select {
	case res := <-done:
		t.Fatalf("the run ended while job_execution was locked: %+v %v", res.out, res.err)
	case <-time.After(30 * time.Second):
	}
	require.NoError(t, tx.Commit(ctx))

	var res result
	select {
	case res = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the run did not end within 2 minutes of the lock's release")
	}
	require.NoError(t, res.err)
	require.Equal(t, radartype.ExecutionCompleted, res.out.Status, res.out.Message)
	lookups := b.fake.Stats().Calls[fakeupstream.EndpointCreditLookup]
	require.Len(t, lookups, len(b.targets), "every target looked up")
	repeated := int64(0)
	for _, n := range lookups {
		repeated += n - 1
	}
	t.Logf("lookups repeated across a 30 s lock: %d", repeated)
	require.LessOrEqual(t, repeated, int64(2*fanOut), "a stalled commit repeats at most 2 × FANOUT paid calls")
	b.requireOneGradeEach(t, b.today(), b.targets)
}

package batch_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/radartype"
)

// errGaveUp is a stalled provider call's end when nothing cancels it: the
// provider client's own timeout, long after any stop's.
var errGaveUp = errors.New("provider: no answer within the client's timeout")

// errTooManyFailures fails stalledFanOutJob's chunk past its tolerance.
var errTooManyFailures = errors.New("more than 3 items failed")

// stalledFanOutJob is one chunk of 10 items on FanOutCommit whose provider
// stalls (it sends a byte a second, or nothing): each item's function
// reports its item on started, then waits until its context ends, which it
// reports on abandoned, or until giveUp is closed, when it fails with
// errGaveUp. Like creditEval, the chunk tolerates 3 failed items and fails
// past them.
type stalledFanOutJob struct {
	started   chan string
	abandoned chan error
	giveUp    chan struct{}
}

func newStalledFanOutJob() *stalledFanOutJob {
	return &stalledFanOutJob{started: make(chan string, 10), abandoned: make(chan error, 10), giveUp: make(chan struct{})}
}

func (j *stalledFanOutJob) Plan(context.Context, *batch.Run) (*batch.Plan, error) {
	return &batch.Plan{Chunks: []string{"c"}, Targets: 10}, nil
}

func (j *stalledFanOutJob) Process(ctx context.Context, run *batch.Run, chunk string) (*batch.ChunkResult, error) {
	items := make([]string, 10)
	for i := range items {
		items[i] = fmt.Sprintf("i%02d", i)
	}
	_, err := batch.FanOutCommit(ctx, run, chunk, items,
		func(ctx context.Context, item string) (string, error) {
			j.started <- item
			select {
			case <-ctx.Done():
				j.abandoned <- context.Cause(ctx)
				return "", ctx.Err()
			case <-j.giveUp:
				return "", errGaveUp
			}
		},
		batch.Committer[string, string]{
			Key:   func(s string) string { return s },
			Queue: func(b *pgx.Batch, values []string) { b.Queue(`SELECT $1::text[]`, values) },
			Failed: func(failed int64, _ error) error {
				if failed > 3 {
					return errTooManyFailures
				}
				return nil
			},
		})
	if err != nil {
		return nil, err
	}
	return &batch.ChunkResult{}, nil // every item is accounted for by its part
}

// oneCallJob has three chunks of one target, each made of one provider
// call, like aptTrade's region×month. The call of chunk c01 reports itself
// on entered and then stalls: it ends when its context does (reported on
// abandoned), fails when giveUp is closed, or answers when answer is.
type oneCallJob struct {
	entered   chan struct{}
	abandoned chan error
	giveUp    chan struct{}
	answer    chan struct{}
}

func newOneCallJob() *oneCallJob {
	return &oneCallJob{entered: make(chan struct{}), abandoned: make(chan error, 1), giveUp: make(chan struct{}), answer: make(chan struct{})}
}

func (j *oneCallJob) Plan(context.Context, *batch.Run) (*batch.Plan, error) {
	return &batch.Plan{Chunks: chunkKeys(3), Targets: 3}, nil
}

func (j *oneCallJob) Process(ctx context.Context, _ *batch.Run, chunk string) (*batch.ChunkResult, error) {
	if chunk == "c01" {
		close(j.entered)
		select {
		case <-ctx.Done():
			j.abandoned <- context.Cause(ctx)
			return nil, fmt.Errorf("provider call of chunk %s: %w", chunk, ctx.Err())
		case <-j.giveUp:
			return nil, errGaveUp
		case <-j.answer:
		}
	}
	return &batch.ChunkResult{Targets: 1, Written: 1}, nil
}

// stopFast bounds a stop tightly, so a test of it takes a fraction of a
// second: the run reads its status every 10 ms, and the calls in flight
// get 200 ms once it has seen the stop.
func stopFast(c *batch.Config) {
	c.FanOut = 2
	c.StopTimeout = 200 * time.Millisecond
	c.StopCheckInterval = 10 * time.Millisecond
}

// requestStop marks the job's running execution STOPPING, as
// POST /v1/jobs/{job}/stop does.
func (b *testBundle) requestStop(t *testing.T, job string) {
	t.Helper()
	_, err := queries.New().JobExecutionRequestStop(context.Background(), b.pool, job)
	require.NoError(t, err)
}

// runStopped runs the request and returns a function waiting for Run's
// result. A stop bounded by stopFast ends the run well within 10 s; past
// them the test fails, and giveUp is closed, as the provider client's own
// timeout would end the stalled calls, so that the rest of the test shows
// how the run then ends.
func runStopped(t *testing.T, runner *batch.Runner, requestID int64, giveUp chan struct{}) func() (*batch.Outcome, error) {
	t.Helper()
	type result struct {
		out *batch.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := runner.Run(context.Background(), batch.RunOpts{RequestID: requestID})
		done <- result{out, err}
	}()
	return func() (*batch.Outcome, error) {
		t.Helper()
		select {
		case r := <-done:
			return r.out, r.err
		case <-time.After(10 * time.Second):
			t.Errorf("the stopped run did not end within 10s: its stalled calls were not abandoned; letting them fail")
			close(giveUp)
		}
		select {
		case r := <-done:
			return r.out, r.err
		case <-time.After(time.Minute):
			t.Fatal("Run did not return within a minute of its calls failing")
			return nil, nil
		}
	}
}

// receive returns the next value of ch, failing the test past a minute.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("no %s within a minute", what)
		var zero T
		return zero
	}
}

// A stop is bounded like a drain, also in a fan-out chunk whose provider
// stalls: the run learns of the stop while every call is in
// flight, not at a part commit that none of them reaches; from then on it
// hands out no item, the calls in flight get StopTimeout and are then
// cancelled, their results uncommitted, and the execution ends STOPPED with
// cause operator — not STOPPING for as long as the calls last, nor FAILED
// once they fail past the chunk's tolerance.
func TestStop_FanOutStalledCallsAbandonedAtStopTimeout(t *testing.T) {
	t.Parallel()
	job := newStalledFanOutJob()
	b := setup(t, map[string]batch.Job{"creditEval": job}, stopFast)
	id := b.enqueue(t, "creditEval")
	wait := runStopped(t, b.runner, id, job.giveUp)
	for range 2 {
		receive(t, job.started, "call of the fan-out")
	}
	// Both slots hold a stalled call; the producer waits for one to free.
	b.requestStop(t, "creditEval")

	out, err := wait()
	require.NoError(t, err)
	require.Zero(t, len(job.started), "items handed out after the stop")
	require.Equal(t, radartype.ExecutionStopped, out.Status, out.Message)
	require.Equal(t, batch.MessageStopTimeout, out.Message)
	for range 2 {
		require.ErrorIs(t, receive(t, job.abandoned, "abandoned call"), batch.ErrStopTimeout,
			"the stalled calls were cancelled at the stop timeout")
	}
	exec, err := queries.New().JobExecutionGetByID(context.Background(), b.pool, out.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, "STOPPED", exec.Status)
	require.Equal(t, "operator", exec.StopCause)
	require.Zero(t, countRows(t, b, `SELECT count(*) FROM job_checkpoint_part`), "nothing of the abandoned calls was committed")
}

// A job that makes one call at a time (aptTrade: one per chunk) is bounded
// the same way: its call in flight gets StopTimeout, is then cancelled, the
// chunk rolls back (a resume does it again) and the execution ends STOPPED
// with cause operator. A call that answers within the stop timeout is not
// lost: its chunk commits and the run stops at that boundary.
func TestStop_OneCallPerChunk(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		answer      bool // the stalled call answers once the stop is requested
		wantMessage string
		wantChunks  int32
	}{
		"StalledCallAbandoned": {wantMessage: batch.MessageStopTimeout, wantChunks: 1},
		"CallAnswersInTime":    {answer: true, wantMessage: batch.MessageStopRequested, wantChunks: 2},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			job := newOneCallJob()
			configure := stopFast
			if tc.answer {
				configure = func(c *batch.Config) {
					stopFast(c)
					c.StopTimeout = time.Hour // the answer comes first, however loaded the machine
				}
			}
			b := setup(t, map[string]batch.Job{"aptTrade": job}, configure)
			id := b.enqueue(t, "aptTrade")
			wait := runStopped(t, b.runner, id, job.giveUp)
			receive(t, job.entered, "call of chunk c01")
			b.requestStop(t, "aptTrade")
			if tc.answer {
				close(job.answer)
			}

			out, err := wait()
			require.NoError(t, err)
			require.Equal(t, radartype.ExecutionStopped, out.Status, out.Message)
			require.Equal(t, tc.wantMessage, out.Message)
			exec, err := queries.New().JobExecutionGetByID(context.Background(), b.pool, out.ExecutionID)
			require.NoError(t, err)
			require.Equal(t, "operator", exec.StopCause)
			require.Equal(t, tc.wantChunks, exec.ChunksDone)
			require.Equal(t, int(tc.wantChunks), countRows(t, b, `SELECT count(*) FROM job_checkpoint`))
			if !tc.answer {
				require.ErrorIs(t, receive(t, job.abandoned, "abandoned call"), batch.ErrStopTimeout)
			}
		})
	}
}

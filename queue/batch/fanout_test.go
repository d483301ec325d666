package batch_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queue/batch"
)

const fanOutTestJob = "creditEval"

type fanOutBundle struct {
	providers   *observability.Providers
	instruments *observability.Instruments
	logger      *slog.Logger
}

func fanOutSetup(t *testing.T) *fanOutBundle {
	t.Helper()
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	return &fanOutBundle{providers: providers, instruments: instruments, logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func (b *fanOutBundle) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	v, err := observabilitytest.MetricValue(b.providers, name, labels)
	require.NoError(t, err)
	return v
}

func (b *fanOutBundle) pool(t *testing.T, size int) *batch.FanOut {
	t.Helper()
	p, err := batch.NewFanOut(batch.FanOutConfig{Job: fanOutTestJob, Size: size, Instruments: b.instruments, Logger: b.logger})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func (b *fanOutBundle) run(size int) *batch.Run {
	return &batch.Run{Job: fanOutTestJob, FanOut: size, Instruments: b.instruments, Logger: b.logger}
}

// executor is what the saturation scenario drives: the bounded fan-out, or
// the naive executor that lost items in the lost-events incident.
type executor interface {
	Submit(ctx context.Context, fn func(context.Context) error) error
	Waiting() int
	Close() error
}

var errQueueFull = errors.New("queue full: item rejected")

// naiveExecutor is the lost-events incident's executor, kept as the negative
// control: `workers` goroutines behind a bounded queue that drops an item
// when it is full (Java's ThreadPoolExecutor with its default
// AbortPolicy, and a poll loop that moves on after the exception).
type naiveExecutor struct {
	job         string
	instruments *observability.Instruments
	queue       chan func(context.Context) error
	wg          sync.WaitGroup
}

func newNaiveExecutor(b *fanOutBundle, workers, queueSize int) *naiveExecutor {
	e := &naiveExecutor{job: fanOutTestJob, instruments: b.instruments, queue: make(chan func(context.Context) error, queueSize)}
	for range workers {
		e.wg.Go(func() {
			for fn := range e.queue {
				_ = fn(context.Background())
			}
		})
	}
	return e
}

func (e *naiveExecutor) Submit(ctx context.Context, fn func(context.Context) error) error {
	select {
	case e.queue <- fn:
		return nil
	default: // no backpressure: the item is dropped, only counted
		e.instruments.FanoutRejected(ctx, e.job, observability.ReasonQueueFull)
		return errQueueFull
	}
}

func (e *naiveExecutor) Waiting() int { return 0 } // its producer never waits

func (e *naiveExecutor) Close() error {
	close(e.queue)
	e.wg.Wait()
	return nil
}

type saturation struct {
	processed, rejected int
	// inflightAtPeak is the in-flight gauge while every worker was held.
	inflightAtPeak float64
}

// saturate is the latch-based saturation test, with no sleeps: `workers`
// workers are all held on a latch, workers+extra items are pushed, then the
// latch is released and every item that was accepted runs.
func saturate(t *testing.T, b *fanOutBundle, ex executor, workers, extra int) saturation {
	t.Helper()
	ctx := context.Background()
	latch := make(chan struct{})
	started := make(chan struct{}, workers+extra)
	var processed atomic.Int64
	rejected := 0
	producerDone := make(chan struct{})
	go func() {
		defer close(producerDone)
		for range workers + extra {
			err := ex.Submit(ctx, func(context.Context) error {
				started <- struct{}{}
				<-latch
				processed.Add(1)
				return nil
			})
			if err != nil {
				rejected++ // a poll loop that logs the refusal and moves on: gone
			}
		}
	}()

	timeout := time.After(30 * time.Second)
	for range workers {
		select {
		case <-started:
		case <-timeout:
			t.Fatal("the workers never all picked an item")
		}
	}
	// Saturated: every worker is held. Wait until the producer is either
	// blocked for a slot (backpressure) or has pushed everything (none).
	finished := func() bool {
		select {
		case <-producerDone:
			return true
		default:
			return false
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for ex.Waiting() == 0 && !finished() {
		require.True(t, time.Now().Before(deadline), "producer neither blocked nor finished")
		time.Sleep(time.Millisecond) // polling a condition, with a deadline
	}
	out := saturation{inflightAtPeak: b.metric(t, observability.MetricFanoutInflight, map[string]string{"job": fanOutTestJob})}
	close(latch)
	<-producerDone
	require.NoError(t, ex.Close())
	out.processed, out.rejected = int(processed.Load()), rejected
	return out
}

// The saturation test: pool N, all N workers held on a
// latch, N+20 items pushed, latch released → every item processed, no
// rejection; the same scenario on the naive bounded-queue executor loses
// items, so the test can fail.
func TestFanOut_Saturation(t *testing.T) {
	t.Parallel()
	const workers, extra = 4, 20

	t.Run("BoundedFanOut", func(t *testing.T) {
		t.Parallel()
		b := fanOutSetup(t)
		pool := b.pool(t, workers)
		got := saturate(t, b, pool, workers, extra)
		require.Equal(t, workers+extra, got.processed, "every item pushed is processed")
		require.Zero(t, got.rejected)
		require.Zero(t, b.metric(t, observability.MetricFanoutRejections, map[string]string{"job": fanOutTestJob}))
		require.Equal(t, float64(workers), got.inflightAtPeak, "in flight while saturated = capacity")
		require.Equal(t, workers, pool.Peak(), "never more in flight than slots")
		require.Zero(t, b.metric(t, observability.MetricFanoutInflight, map[string]string{"job": fanOutTestJob}))
		require.Equal(t, float64(workers), b.metric(t, observability.MetricFanoutCapacity, map[string]string{"job": fanOutTestJob}))
	})

	t.Run("NegativeControl_NaiveBoundedQueue", func(t *testing.T) {
		t.Parallel()
		b := fanOutSetup(t)
		const queueSize = 10 // the incident's 3,000 slots, scaled to the test
		got := saturate(t, b, newNaiveExecutor(b, workers, queueSize), workers, extra)
		require.Less(t, got.processed, workers+extra, "the naive executor loses items")
		require.GreaterOrEqual(t, got.rejected, extra-queueSize)
		require.Equal(t, workers+extra, got.processed+got.rejected)
		require.Equal(t, float64(got.rejected), b.metric(t, observability.MetricFanoutRejections,
			map[string]string{"job": fanOutTestJob, "reason": observability.ReasonQueueFull}))
	})
}

// A slot is released when the handed-over function panics or fails: with
// one slot, the next Submit still gets it.
func TestFanOut_SlotReleasedOnPanicAndError(t *testing.T) {
	t.Parallel()
	b := fanOutSetup(t)
	pool := b.pool(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	require.NoError(t, pool.Submit(ctx, func(context.Context) error { panic("boom") }))
	require.NoError(t, pool.Submit(ctx, func(context.Context) error { return errors.New("item failed") }), "the panicking item released its slot")
	ran := make(chan struct{})
	require.NoError(t, pool.Submit(ctx, func(context.Context) error { close(ran); return nil }), "the failing item released its slot")
	<-ran

	err := pool.Close()
	var panicErr *batch.PanicError
	require.ErrorAs(t, err, &panicErr)
	require.Equal(t, "boom", panicErr.Value)
	require.Zero(t, pool.InFlight())
	require.Zero(t, b.metric(t, observability.MetricFanoutInflight, map[string]string{"job": fanOutTestJob}))
}

// Submitting to a closed pool is refused and counted (reason closed).
func TestFanOut_SubmitAfterClose(t *testing.T) {
	t.Parallel()
	b := fanOutSetup(t)
	pool := b.pool(t, 2)
	require.NoError(t, pool.Close())
	err := pool.Submit(context.Background(), func(context.Context) error { return nil })
	require.ErrorIs(t, err, batch.ErrFanOutClosed)
	require.Equal(t, float64(1), b.metric(t, observability.MetricFanoutRejections,
		map[string]string{"job": fanOutTestJob, "reason": observability.ReasonClosed}))
	require.Zero(t, pool.InFlight())
}

// A producer waiting for a slot gives up when its ctx ends: the item is not
// handed over and nothing is counted as a rejection (it stays with the
// caller).
func TestFanOut_SubmitWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	b := fanOutSetup(t)
	pool := b.pool(t, 1)
	latch := make(chan struct{})
	require.NoError(t, pool.Submit(context.Background(), func(context.Context) error { <-latch; return nil }))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- pool.Submit(ctx, func(context.Context) error { t.Error("handed over after cancel"); return nil })
	}()
	deadline := time.Now().Add(30 * time.Second)
	for pool.Waiting() == 0 {
		require.True(t, time.Now().Before(deadline))
		time.Sleep(time.Millisecond)
	}
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	close(latch)
	require.NoError(t, pool.Close())
	require.Zero(t, b.metric(t, observability.MetricFanoutRejections, map[string]string{"job": fanOutTestJob}))
}

// Cancellation (stop, drain) stops handing over and waits for the items in
// flight; the items never handed over are reported as not processed.
func TestFanOutEach_CancelWaitsForInFlight(t *testing.T) {
	t.Parallel()
	b := fanOutSetup(t)
	const slots, items = 2, 10
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	latch := make(chan struct{})
	started := make(chan struct{}, items)
	sawCancel := make(chan struct{}, items)
	var finished atomic.Int64

	type outcome struct {
		results  []batch.ItemResult[int]
		err      error
		finished int64
	}
	done := make(chan outcome, 1)
	go func() {
		results, err := batch.FanOutEach(ctx, b.run(slots), make([]int, items), func(ctx context.Context, _ int) (int, error) {
			started <- struct{}{}
			<-ctx.Done()
			sawCancel <- struct{}{}
			<-latch
			finished.Add(1)
			return 7, nil
		})
		done <- outcome{results, err, finished.Load()}
	}()
	for range slots {
		<-started
	}
	cancel()
	for range slots {
		<-sawCancel
	}
	select {
	case <-done:
		t.Fatal("FanOutEach returned while items were still in flight")
	default:
	}
	close(latch)
	out := <-done
	require.ErrorIs(t, out.err, context.Canceled)
	require.Equal(t, int64(slots), out.finished, "returned only after the items in flight finished")
	handedOver := 0
	for _, r := range out.results {
		if r.Done {
			handedOver++
			require.Equal(t, 7, r.Value)
		}
	}
	require.Equal(t, slots, handedOver, "the others were never handed over: not processed")
	require.Zero(t, b.metric(t, observability.MetricFanoutInflight, map[string]string{"job": fanOutTestJob}))
	require.Zero(t, b.metric(t, observability.MetricFanoutRejections, map[string]string{"job": fanOutTestJob}))
}

// A Halt error stops handing over (the items after it are not processed)
// and is returned; a panicking item is a failed item, not a crash.
func TestFanOutEach_HaltAndPanic(t *testing.T) {
	t.Parallel()
	b := fanOutSetup(t)
	errCap := errors.New("daily cap reached")
	results, err := batch.FanOutEach(context.Background(), b.run(1), []int{0, 1, 2, 3, 4, 5}, func(_ context.Context, i int) (int, error) {
		switch i {
		case 1:
			panic("bad item")
		case 3:
			return 0, batch.Halt(errCap)
		}
		return i * 10, nil
	})
	require.ErrorIs(t, err, errCap)
	require.Len(t, results, 6)
	require.Equal(t, batch.ItemResult[int]{Value: 0, Done: true}, results[0])
	var panicErr *batch.PanicError
	require.ErrorAs(t, results[1].Err, &panicErr)
	require.Equal(t, batch.ItemResult[int]{Value: 20, Done: true}, results[2])
	require.ErrorIs(t, results[3].Err, errCap)
	require.True(t, results[3].Done)
	require.False(t, results[4].Done, "nothing is handed over after a halt")
	require.False(t, results[5].Done)
}

// Many items through a small pool: all processed, in order of the results,
// and the in-flight count (and its gauge) never exceeds the capacity.
func TestFanOutEach_NeverExceedsCapacity(t *testing.T) {
	t.Parallel()
	b := fanOutSetup(t)
	const slots, items = 8, 400
	var inflight, maxSeen, maxGauge atomic.Int64
	observe := func(v *atomic.Int64, n int64) {
		for {
			cur := v.Load()
			if n <= cur || v.CompareAndSwap(cur, n) {
				return
			}
		}
	}
	input := make([]int, items)
	for i := range input {
		input[i] = i
	}
	results, err := batch.FanOutEach(context.Background(), b.run(slots), input, func(_ context.Context, i int) (int, error) {
		observe(&maxSeen, inflight.Add(1))
		defer inflight.Add(-1)
		if i%20 == 0 {
			v, err := observabilitytest.MetricValue(b.providers, observability.MetricFanoutInflight, map[string]string{"job": fanOutTestJob})
			if err == nil {
				observe(&maxGauge, int64(v))
			}
		}
		return i, nil
	})
	require.NoError(t, err)
	for i, r := range results {
		require.Equal(t, batch.ItemResult[int]{Value: i, Done: true}, r)
	}
	require.LessOrEqual(t, maxSeen.Load(), int64(slots))
	require.LessOrEqual(t, maxGauge.Load(), int64(slots))
	require.Zero(t, b.metric(t, observability.MetricFanoutInflight, map[string]string{"job": fanOutTestJob}))
	require.Zero(t, b.metric(t, observability.MetricFanoutRejections, map[string]string{"job": fanOutTestJob}))
}

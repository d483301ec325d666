package batch_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtest"
)

// writeMarker is the statement writeJob's chunks write: one round trip of
// data in the chunk's transaction, and a marker in the trace.
const writeMarker = "SELECT 'chunk write', $1::text"

// writeJob has `chunks` chunks of one target each; each writes one
// statement in its checkpoint transaction, run by a Write function or, when
// queued, sent in the commit's batch (ChunkResult.Queue).
type writeJob struct {
	chunks int
	queued bool
}

func (j *writeJob) Plan(context.Context, *batch.Run) (*batch.Plan, error) {
	plan := &batch.Plan{Targets: int64(j.chunks)}
	plan.Chunks = chunkKeys(j.chunks)
	return plan, nil
}

func (j *writeJob) Process(_ context.Context, _ *batch.Run, chunk string) (*batch.ChunkResult, error) {
	if j.queued {
		return &batch.ChunkResult{Targets: 1, Written: 1, Queue: func(b *pgx.Batch) { b.Queue(writeMarker, chunk) }}, nil
	}
	return &batch.ChunkResult{Targets: 1, Written: 1, Write: func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, writeMarker, chunk)
		return err
	}}, nil
}

// A chunk whose writes are queued statements costs one round trip: its
// writes and its fenced bookkeeping (counts, checkpoint) in one implicit
// transaction. A chunk with a Write function costs its writes plus two: the
// begin pipelined with the bookkeeping, and the commit. The trace between
// two chunks' writes is pinned, so a statement added to the chunk path
// shows here.
func TestRunner_ChunkRoundTrips(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		queued bool
		trips  int
	}{
		"Queued": {queued: true, trips: 1},
		"Write":  {queued: false, trips: 3},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			job := &writeJob{chunks: 6, queued: tc.queued}
			b := setup(t, map[string]batch.Job{"metrics": job})
			tracer := &pgtest.RoundTripTracer{}
			pool := pgtest.NewTracedPool(t, b.pool, tracer)
			runner, err := batch.NewRunner(pool, batch.Config{Owner: b.enqueuer,
				WorkerID: "1@test#boot", Jobs: map[string]batch.Job{"metrics": job},
				Upstream: b.upstream, Instruments: b.instruments, LeaseCheckInterval: time.Hour,
			})
			require.NoError(t, err)

			out, err := runner.Run(context.Background(), batch.RunOpts{RequestID: b.enqueue(t, "metrics")})
			require.NoError(t, err)
			require.Equal(t, radartype.ExecutionCompleted, out.Status, out.Message)

			// The writes of the chunks, by position in the trace.
			trips := tracer.Log()
			var writes []int
			for i, s := range trips {
				if s == writeMarker || strings.HasPrefix(s, "batch: ") && strings.Contains(s, writeMarker) {
					writes = append(writes, i)
				}
			}
			require.Len(t, writes, 6)
			// From the second chunk on, statements are prepared: each
			// interval from one chunk's write to the next is one whole chunk.
			for k := 2; k < len(writes); k++ {
				between := trips[writes[k-1]+1 : writes[k]+1]
				require.Len(t, between, tc.trips, "round trips of chunk %d: %q", k, between)
			}
		})
	}
}

// partTripsJob has one chunk of `items` items committed one part at a time (a
// fan-out of one slot); each part writes one statement.
type partTripsJob struct{ items int }

func (j *partTripsJob) Plan(context.Context, *batch.Run) (*batch.Plan, error) {
	return &batch.Plan{Chunks: []string{"c00"}, Targets: int64(j.items)}, nil
}

func (j *partTripsJob) Process(ctx context.Context, run *batch.Run, chunk string) (*batch.ChunkResult, error) {
	items := make([]string, j.items)
	for i := range items {
		items[i] = fmt.Sprintf("i%02d", i)
	}
	_, err := batch.FanOutCommit(ctx, run, chunk, items,
		func(_ context.Context, item string) (string, error) { return item, nil },
		batch.Committer[string, string]{
			Key:   func(item string) string { return item },
			Queue: func(b *pgx.Batch, values []string) { b.Queue(writeMarker, values[0]) },
		})
	if err != nil {
		return nil, err
	}
	return &batch.ChunkResult{}, nil
}

// A part commit of a fan-out chunk costs one round trip: the part's writes
// and its fenced bookkeeping (count, part) in one implicit transaction.
func TestRunner_PartRoundTrips(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]batch.Job{"creditEval": &partTripsJob{items: 6}})
	tracer := &pgtest.RoundTripTracer{}
	pool := pgtest.NewTracedPool(t, b.pool, tracer)
	runner, err := batch.NewRunner(pool, batch.Config{Owner: b.enqueuer,
		WorkerID: "1@test#boot", Jobs: map[string]batch.Job{"creditEval": &partTripsJob{items: 6}},
		Upstream: b.upstream, Instruments: b.instruments, LeaseCheckInterval: time.Hour, FanOut: 1,
	})
	require.NoError(t, err)

	out, err := runner.Run(context.Background(), batch.RunOpts{RequestID: b.enqueue(t, "creditEval")})
	require.NoError(t, err)
	require.Equal(t, radartype.ExecutionCompleted, out.Status, out.Message)

	trips := tracer.Log()
	isPart := func(trip string) bool {
		return strings.HasPrefix(trip, "batch: ") && strings.Contains(trip, writeMarker)
	}
	first, last := -1, -1
	for i, trip := range trips {
		if !isPart(trip) {
			continue
		}
		if first < 0 {
			first = i
		}
		last = i
	}
	require.GreaterOrEqual(t, first, 0, "no part committed: %q", trips)
	parts := trips[first : last+1]
	// With one slot, at most paidWindow(1) = 2 items wait for their parts,
	// so six items take at least three parts.
	require.GreaterOrEqual(t, len(parts), 3, "%q", parts)
	for _, trip := range parts {
		require.True(t, isPart(trip), "every round trip from the first part to the last is a whole part: %q", parts)
	}
}

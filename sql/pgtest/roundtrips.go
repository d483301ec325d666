package pgtest

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RoundTripTracer records every round trip a pool makes to the server, in
// order: each statement (a BEGIN and a COMMIT are statements), each
// pipelined batch as one ("batch: " and its statements joined by "; "), and
// each prepare. Tests pin a hot path's round trips with it, so a statement
// added to the path shows as a failure.
type RoundTripTracer struct {
	// OnTrip, when set, is called with each round trip as it starts, on the
	// goroutine that makes it (a test marks which of its calls made it).
	OnTrip func(statement string)

	mu    sync.Mutex
	trips []string
}

// NewTracedPool returns a pool on the database of pool, of one connection
// (every statement on it: prepared once), whose round trips tracer
// records.
func NewTracedPool(t testing.TB, pool *pgxpool.Pool, tracer *RoundTripTracer) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pool.Config().ConnString())
	if err != nil {
		t.Fatalf("pgtest: parsing the pool's configuration: %v", err)
	}
	cfg.ConnConfig.Tracer = tracer
	cfg.MaxConns = 1
	traced, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: opening a traced pool: %v", err)
	}
	t.Cleanup(traced.Close)
	return traced
}

func (rt *RoundTripTracer) add(s string) {
	rt.mu.Lock()
	rt.trips = append(rt.trips, s)
	onTrip := rt.OnTrip
	rt.mu.Unlock()
	if onTrip != nil {
		onTrip(s)
	}
}

// Log returns the round trips recorded so far.
func (rt *RoundTripTracer) Log() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return append([]string(nil), rt.trips...)
}

// Reset forgets the round trips recorded so far.
func (rt *RoundTripTracer) Reset() {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.trips = nil
}

// TraceQueryStart implements pgx.QueryTracer.
func (rt *RoundTripTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	rt.add(data.SQL)
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (rt *RoundTripTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart implements pgx.BatchTracer.
func (rt *RoundTripTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	var sqls []string
	for _, q := range data.Batch.QueuedQueries {
		sqls = append(sqls, q.SQL)
	}
	rt.add("batch: " + strings.Join(sqls, "; "))
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (rt *RoundTripTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (rt *RoundTripTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TracePrepareStart implements pgx.PrepareTracer.
func (rt *RoundTripTracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, data pgx.TracePrepareStartData) context.Context {
	rt.add("prepare: " + data.SQL)
	return ctx
}

// TracePrepareEnd implements pgx.PrepareTracer.
func (rt *RoundTripTracer) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

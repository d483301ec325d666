package worker_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queue/worker"
)

// identityDB answers the identity query with whatever the test set, or
// with err.
type identityDB struct {
	mu          sync.Mutex
	system      int64
	timeline    int64
	standbys    string
	syncCommit  string
	err         error
	queriesSeen int
}

func (db *identityDB) set(system, timeline int64) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.system, db.timeline, db.err = system, timeline, nil
}

func (db *identityDB) QueryRow(context.Context, string, ...any) pgx.Row {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.queriesSeen++
	return identityRow{values: []any{db.system, db.timeline, false, db.standbys, db.syncCommit}, err: db.err}
}

func (db *identityDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errors.New("not supported")
}

func (db *identityDB) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errors.New("not supported")
}

func (db *identityDB) CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error) {
	return 0, errors.New("not supported")
}

type identityRow struct {
	values []any
	err    error
}

func (r identityRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	for i, d := range dest {
		switch d := d.(type) {
		case *int64:
			*d = r.values[i].(int64)
		case *bool:
			*d = r.values[i].(bool)
		case *string:
			*d = r.values[i].(string)
		}
	}
	return nil
}

// watchBundle is a DatabaseWatch with its metrics and log.
type watchBundle struct {
	watch     *worker.DatabaseWatch
	providers *observability.Providers
	log       *bytes.Buffer
	logMu     *sync.Mutex
}

func newWatchBundle(t *testing.T) *watchBundle {
	t.Helper()
	providers, _ := observabilitytest.NewProviders()
	inst, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	b := &watchBundle{providers: providers, log: &bytes.Buffer{}, logMu: &sync.Mutex{}}
	logger := slog.New(slog.NewTextHandler(lockedWriter{b.log, b.logMu}, nil))
	b.watch = worker.NewDatabaseWatch(inst, logger)
	return b
}

type lockedWriter struct {
	buf *bytes.Buffer
	mu  *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (b *watchBundle) failovers(t *testing.T) float64 {
	t.Helper()
	v, err := observabilitytest.MetricValue(b.providers, observability.MetricDatabaseFailovers, nil)
	require.NoError(t, err)
	return v
}

func (b *watchBundle) logLines(level string) []string {
	b.logMu.Lock()
	defer b.logMu.Unlock()
	var out []string
	for line := range strings.SplitSeq(strings.TrimSpace(b.log.String()), "\n") {
		if strings.Contains(line, "level="+level) {
			out = append(out, line)
		}
	}
	return out
}

// The first identity a process sees is recorded, not counted; a new
// timeline of the same cluster (a promoted replica) and then another
// cluster are each counted once, logged once at WARN naming both
// identities, and handed to every subscriber still subscribed; seeing the
// same identity again changes nothing.
func TestDatabaseWatch_CountsEachMoveOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newWatchBundle(t)
	db := &identityDB{}
	var moves []worker.DatabaseMove
	b.watch.Subscribe(func(m worker.DatabaseMove) { moves = append(moves, m) })
	var cancelled int
	cancel := b.watch.Subscribe(func(worker.DatabaseMove) { cancelled++ })

	db.set(7001, 1)
	require.NoError(t, b.watch.Check(ctx, db))
	require.NoError(t, b.watch.Check(ctx, db))
	require.Zero(t, b.failovers(t), "the first identity is no move")
	require.Len(t, b.logLines("INFO"), 1, "the first identity is logged once")
	require.Contains(t, b.logLines("INFO")[0], "system_identifier=7001")

	db.set(7001, 2)
	require.NoError(t, b.watch.Check(ctx, db))
	require.NoError(t, b.watch.Check(ctx, db))
	require.Equal(t, float64(1), b.failovers(t))
	require.Equal(t, 1, cancelled)
	cancel()
	cancel() // idempotent

	db.set(7002, 1)
	require.NoError(t, b.watch.Check(ctx, db))
	require.Equal(t, float64(2), b.failovers(t))
	require.Equal(t, 1, cancelled, "a cancelled subscriber is not called")

	require.Equal(t, []worker.DatabaseMove{
		{From: worker.DatabaseIdentity{SystemIdentifier: 7001, Timeline: 1}, To: worker.DatabaseIdentity{SystemIdentifier: 7001, Timeline: 2}},
		{From: worker.DatabaseIdentity{SystemIdentifier: 7001, Timeline: 2}, To: worker.DatabaseIdentity{SystemIdentifier: 7002, Timeline: 1}},
	}, moves)
	require.True(t, moves[0].Failover())
	require.False(t, moves[1].Failover())

	warns := b.logLines("WARN")
	require.Len(t, warns, 2, "one line per move")
	require.Contains(t, warns[0], "database failover")
	require.Contains(t, warns[0], `from="system 7001, timeline 1"`)
	require.Contains(t, warns[0], `to="system 7001, timeline 2"`)
	require.Contains(t, warns[1], "another cluster")
}

// Probes that see the same move at the same time count it once.
func TestDatabaseWatch_ConcurrentChecksCountOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newWatchBundle(t)
	db := &identityDB{}
	db.set(7001, 1)
	require.NoError(t, b.watch.Check(ctx, db))
	db.set(7001, 2)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { require.NoError(t, b.watch.Check(ctx, db)) })
	}
	wg.Wait()
	require.Equal(t, float64(1), b.failovers(t))
	require.Len(t, b.logLines("WARN"), 1)
}

// A failed read is returned and logged once until a read succeeds again;
// it counts nothing, and the identity read after it is compared with the
// one seen before it.
func TestDatabaseWatch_ReadErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newWatchBundle(t)
	db := &identityDB{}
	db.set(7001, 1)
	require.NoError(t, b.watch.Check(ctx, db))

	db.mu.Lock()
	db.err = errors.New("permission denied for function pg_control_system")
	db.mu.Unlock()
	require.ErrorContains(t, b.watch.Check(ctx, db), "permission denied")
	require.ErrorContains(t, b.watch.Check(ctx, db), "permission denied")
	require.Len(t, b.logLines("WARN"), 1, "logged once")

	db.set(7001, 1)
	require.NoError(t, b.watch.Check(ctx, db))
	require.Zero(t, b.failovers(t))

	var nilWatch *worker.DatabaseWatch
	require.NoError(t, nilWatch.Check(ctx, db), "a nil watch checks nothing")
	nilWatch.Subscribe(func(worker.DatabaseMove) {})()
}

// buildrisk_database_sync_replication follows the settings each Check
// reads: 1 only with a synchronous standby named and commits that wait
// for its disk.
func TestDatabaseWatch_SyncReplicationGauge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newWatchBundle(t)
	db := &identityDB{}
	db.set(7001, 1)
	gauge := func() float64 {
		v, err := observabilitytest.MetricValue(b.providers, observability.MetricDatabaseSyncRepl, nil)
		require.NoError(t, err)
		return v
	}
	for _, tt := range []struct {
		standbys, commit string
		want             float64
	}{
		{"", "on", 0},
		{`"standby_a"`, "on", 1},
		{`FIRST 1 (a, b)`, "remote_apply", 1},
		{`ANY 1 (a, b)`, "remote_write", 0},
		{`a`, "local", 0},
		{`a`, "off", 0},
		{"  ", "on", 0},
	} {
		db.mu.Lock()
		db.standbys, db.syncCommit = tt.standbys, tt.commit
		db.mu.Unlock()
		require.NoError(t, b.watch.Check(ctx, db))
		require.Equal(t, tt.want, gauge(), "synchronous_standby_names=%q synchronous_commit=%s", tt.standbys, tt.commit)
		require.Equal(t, tt.want == 1, worker.SynchronousReplication(tt.standbys, tt.commit))
	}
}

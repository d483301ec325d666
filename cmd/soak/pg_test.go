package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// The database faults work on the soak's own server: a fast restart closes
// sessions and the server answers again; a stop refuses connections until
// the start; close leaves nothing running.
func TestPGServer_RestartStopStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := startPG(ctx, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(s.logPath)
			t.Logf("pg_ctl log:\n%s", log)
		}
	})
	ping := func() error {
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		return conn.Ping(ctx)
	}
	session, err := pgx.Connect(ctx, s.URL("postgres"))
	require.NoError(t, err)
	defer session.Close(ctx)

	require.NoError(t, s.restart())
	require.Error(t, session.Ping(ctx), "a fast restart ends open sessions")
	require.NoError(t, ping())

	require.NoError(t, s.stopServer())
	require.Error(t, ping(), "down until started")
	require.NoError(t, s.startServer())
	require.NoError(t, ping())

	require.NoError(t, s.close())
	require.Error(t, ping())
}

// The crash fault kills the postmaster and every backend at once; the
// server comes back from crash recovery with what was committed.
func TestPGServer_Kill9(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := startPG(ctx, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(s.logPath)
			t.Logf("pg_ctl log:\n%s", log)
		}
		_ = s.close()
	})
	session, err := pgx.Connect(ctx, s.URL("postgres"))
	require.NoError(t, err)
	defer session.Close(ctx)
	_, err = session.Exec(ctx, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (1)")
	require.NoError(t, err)

	// Twice: the first postmaster is the soak's child (a zombie until
	// reaped), the second one pg_ctl's.
	for range 2 {
		require.NoError(t, s.kill9())
		require.Error(t, session.Ping(ctx), "every backend is gone")
		require.NoError(t, s.startServer())
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		require.NoError(t, err)
		var n int
		require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM kept").Scan(&n))
		require.Equal(t, 1, n, "committed rows survive the crash")
		session.Close(ctx)
		session = conn
	}
}

// The failover fault on the soak's replicated database, twice: the
// primary killed and the standby promoted, a client on the multi-host URL
// finds the new primary with every commit it made (synchronous
// replication), and the new standby, cloned on the dead primary's port,
// lets the run fail over again with the same URL.
func TestSystem_FailoverTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := &system{cfg: &config{replication: replicationSync}, logger: slog.New(slog.DiscardHandler), ev: &Evidence{}}
	t.Cleanup(s.close)
	require.NoError(t, s.startDatabase(ctx))
	addrs := slices.Clone(s.pgAddrs)
	require.Len(t, addrs, 2)
	require.Contains(t, s.dbURL, "target_session_attrs=read-write")
	query := func(sql string) (int, error) {
		conn, err := pgx.Connect(ctx, s.dbURL)
		if err != nil {
			return 0, err
		}
		defer conn.Close(ctx)
		var n int
		return n, conn.QueryRow(ctx, sql).Scan(&n)
	}
	conn, err := pgx.Connect(ctx, s.dbURL)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE kept (n int)")
	require.NoError(t, err)
	conn.Close(ctx)
	for i := range 2 {
		_, err := query(fmt.Sprintf("WITH i AS (INSERT INTO kept VALUES (%d) RETURNING n) SELECT count(*) FROM i", i))
		require.NoError(t, err)
		old := s.primary()
		ok, err := s.failover(ctx, i == 1) // the second one a split brain
		require.NoError(t, err)
		require.True(t, ok)
		require.NotSame(t, old, s.primary(), "the standby took over")
		require.NotNil(t, s.standby, "a new standby streams")
		n, err := query("SELECT count(*) FROM kept")
		require.NoError(t, err, "the multi-host URL finds the new primary")
		require.Equal(t, i+1, n, "nothing acknowledged was lost")
	}
	require.Equal(t, addrs, s.pgAddrs, "the servers' addresses never change")
	require.Len(t, s.ev.Failovers, 2)
	require.Len(t, s.ev.SplitBrains, 1, "the second failover's old primary came back read-write")
	require.Empty(t, s.ev.SplitBrains[0].Err)
	require.Zero(t, s.ev.SplitBrains[0].Rows, "nobody wrote on it")
}

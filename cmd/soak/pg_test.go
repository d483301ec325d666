package main

import (
	"context"
	"log/slog"
	"os"
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

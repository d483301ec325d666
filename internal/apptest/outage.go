package apptest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/sql/migrations"
	"github.com/buildrisk/radar/sql/pglocal"
	"github.com/buildrisk/radar/sql/pgtest"
)

// PrivateCluster starts a PostgreSQL cluster of the test's own, which it
// may halt and resume, and returns it with the URL of a migrated database.
func PrivateCluster(t *testing.T) (*pglocal.Cluster, string) {
	t.Helper()
	ctx := context.Background()
	cluster, err := pglocal.Start(ctx, pglocal.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop() })
	url := cluster.URL("postgres")
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, migrations.Migrate(ctx, pool, nil))
	return cluster, url
}

// ReplicatedCluster starts a primary and a streaming standby of the test's
// own (pgtest.StartReplicated; synchronous or not) and returns them with
// the multi-host URL (target_session_attrs=read-write) of a migrated
// database on them, the form of production's DATABASE_URL: a system built
// on it follows a Failover by itself.
func ReplicatedCluster(t *testing.T, synchronous bool) (*pgtest.Replicated, string) {
	t.Helper()
	ctx := context.Background()
	pair := pgtest.StartReplicated(t, &pgtest.ReplicatedOpts{Synchronous: synchronous})
	url := pair.URL("postgres")
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, migrations.Migrate(ctx, pool, nil))
	return pair, url
}

// WaitUntil polls cond every 20 ms and fails the test past d.
func WaitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitRequestAfterOutage is waitRequest for a database that was just
// restarted: until the API's pool has replaced its broken connections, an
// answer may be a 5xx (what the API answers during an outage is another
// test's subject), so those are polled past too.
func (s *System) WaitRequestAfterOutage(id string, want ...string) map[string]any {
	s.T.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		status, out := s.Get("/v1/requests/" + id)
		if status == 200 && slices.Contains(want, out["status"].(string)) {
			return out
		}
		require.True(s.T, status == 200 || status >= 500, "GET /v1/requests/%s: %d %v", id, status, out)
		if time.Now().After(deadline) {
			s.T.Fatalf("request %s: %d %v, want %v", id, status, out, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// NoOverlap asserts the invariants of ownership: no two executions of the
// job overlapped in time, and no checkpoint landed in an execution after it
// had ended.
func (s *System) NoOverlap(t *testing.T) {
	t.Helper()
	require.Equal(t, 0, s.Count(`SELECT count(*) FROM job_execution a JOIN job_execution b ON a.id < b.id AND a.job = b.job
		WHERE a.started_at < coalesce(b.ended_at, 'infinity') AND b.started_at < coalesce(a.ended_at, 'infinity')`), "no two executions overlapped")
	require.Equal(t, 0, s.Count(`SELECT count(*) FROM job_checkpoint c JOIN job_execution e ON e.id = c.execution_id
		WHERE c.committed_at > e.ended_at`), "no commit after its execution ended")
}

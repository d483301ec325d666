package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/internal/jobset"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/radartype"
)

// A reaper that was itself cut off from the database (a partition of its
// node) may have been cut off with the workers it judges: once it reaches
// the database again, it reaps nobody for one stale window, then reaps the
// dead worker as before. A reaper never cut off reaps at once.
func TestReaper_CutOffWaitsOneStaleWindowAfterReconnecting(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	ctx := context.Background()
	dead := testfactory.Worker(ctx, t, s.Pool, &testfactory.WorkerOpts{ID: "1@gone#dead", HeartbeatAge: time.Hour})
	testfactory.Request(ctx, t, s.Pool, &testfactory.RequestOpts{
		Job: "aptTrade", RequestedBy: "test", EstimatedCalls: 1, Status: radartype.RequestRunning, WorkerID: dead.ID,
	})

	// Staleness counts from the server's start at the earliest: let the
	// test's cluster be up for a stale window first.
	s.WaitUpForStaleWindow()
	proxy := apptest.NewCutProxy(t, s.DBURL)
	pool, err := pgxpool.New(ctx, proxy.URL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	reaper, err := request.NewOwner(pool, nil, request.Config{Catalog: jobset.Catalog(), StaleAfter: s.Env.StaleAfter, Instruments: s.Tel.Instruments, Logger: s.Tel.Logger})
	require.NoError(t, err)

	proxy.Cut()
	_, err = reaper.Reap(ctx, "")
	require.Error(t, err, "the reaper is cut off")
	proxy.Restore()
	n, err := reaper.Reap(ctx, "")
	require.NoError(t, err)
	require.Zero(t, n, "just reconnected: the reaper waits one stale window before judging anyone")
	require.Equal(t, "RUNNING", s.RequestStatusByWorker("1@gone#dead"))

	apptest.WaitUntil(t, time.Minute, "the reaper to reap the dead worker once the window has passed", func() bool {
		n, err := reaper.Reap(ctx, "")
		require.NoError(t, err)
		return n == 1
	})
	require.Equal(t, "FAILED", s.RequestStatusByWorker("1@gone#dead"))
}

// The reap pass of every worker deletes the api's Idempotency-Key records
// past their retention (each row carries its expiry) and keeps the others.
func TestReapPass_DeletesExpiredIdempotencyKeys(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	ctx := context.Background()
	owner, err := pgx.Connect(ctx, s.OwnerURL) // the workers' role may not insert keys
	require.NoError(t, err)
	defer owner.Close(ctx)
	for key, retention := range map[string]time.Duration{"expired": 0, "kept": time.Hour} {
		testfactory.IdempotencyKey(ctx, t, owner, &testfactory.IdempotencyKeyOpts{
			TokenName: "alice", Key: key, Fingerprint: []byte{0}, Operation: "POST /v1/jobs/aptTrade/stop", Retention: retention,
		})
	}

	s.StartWorker()
	apptest.WaitUntil(t, time.Minute, "the reap pass to delete the expired key", func() bool {
		return s.Count(`SELECT count(*) FROM idempotency_key WHERE key = 'expired'`) == 0
	})
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM idempotency_key WHERE key = 'kept'`))
}

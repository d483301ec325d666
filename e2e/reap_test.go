package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queue/worker"
)

// A reaper that was itself cut off from the database (a partition of its
// node) may have been cut off with the workers it judges: once it reaches
// the database again, it reaps nobody for one stale window, then reaps the
// dead worker as before. A reaper never cut off reaps at once.
func TestReaper_CutOffWaitsOneStaleWindowAfterReconnecting(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	ctx := context.Background()
	_, err := s.Pool.Exec(ctx, `INSERT INTO worker (id, hostname, pid, boot, heartbeat_at) VALUES ('1@gone#dead', 'gone', 1, 'dead', now() - interval '1 hour')`)
	require.NoError(t, err)
	_, err = s.Pool.Exec(ctx, `INSERT INTO job_request (job, source, requested_by, estimated_calls, status, worker_id, claimed_at)
		VALUES ('aptTrade', 'api', 'test', 1, 'RUNNING', '1@gone#dead', now())`)
	require.NoError(t, err)

	// Staleness counts from the server's start at the earliest: let the
	// test's cluster be up for a stale window first.
	s.WaitUpForStaleWindow()
	proxy := apptest.NewCutProxy(t, s.DBURL)
	pool, err := pgxpool.New(ctx, proxy.URL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	reaper := worker.NewReaper(pool, worker.ReaperConfig{StaleAfter: s.Env.StaleAfter, Instruments: s.Tel.Instruments, Logger: s.Tel.Logger})

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
	_, err = owner.Exec(ctx, `INSERT INTO idempotency_key (token_name, key, fingerprint, operation, status, response, expires_at) VALUES
		('alice', 'expired', '\x00', 'POST /v1/jobs/aptTrade/stop', 202, '{}', now() - interval '1 second'),
		('alice', 'kept', '\x00', 'POST /v1/jobs/aptTrade/stop', 202, '{}', now() + interval '1 hour')`)
	require.NoError(t, err)

	s.StartWorker()
	apptest.WaitUntil(t, time.Minute, "the reap pass to delete the expired key", func() bool {
		return s.Count(`SELECT count(*) FROM idempotency_key WHERE key = 'expired'`) == 0
	})
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM idempotency_key WHERE key = 'kept'`))
}

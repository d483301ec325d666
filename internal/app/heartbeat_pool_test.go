package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/dbpool"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/worker"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// A worker's heartbeats have their own pool: with every connection of the
// main pool held by chunk work, the worker still beats and stays alive.
func TestWorker_HeartbeatNeverWaitsBehindChunkWork(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	ctx := context.Background()
	mainCfg, err := pgxpool.ParseConfig(s.DBURL)
	require.NoError(t, err)
	mainCfg.MaxConns = 2
	mainPool, err := pgxpool.NewWithConfig(ctx, mainCfg)
	require.NoError(t, err)
	t.Cleanup(mainPool.Close)
	heartbeatPool, err := dbpool.OpenHeartbeat(ctx, s.DBURL, config.HeartbeatPoolConns, s.Env.DBTimeout, false, config.SessionLimits{})
	require.NoError(t, err)
	t.Cleanup(heartbeatPool.Close)

	w, _ := s.StartWorkerWith(mainPool, func(wc *worker.Config, _ *batch.Config) { wc.HeartbeatPool = heartbeatPool })
	var before time.Time
	require.NoError(t, s.Pool.QueryRow(ctx, "SELECT heartbeat_at FROM worker WHERE id = $1", w.ID()).Scan(&before))

	// Chunk work holds every connection of the main pool.
	held := make([]*pgxpool.Conn, 0, mainCfg.MaxConns)
	for range mainCfg.MaxConns {
		conn, err := mainPool.Acquire(ctx)
		require.NoError(t, err)
		held = append(held, conn)
	}
	defer func() {
		for _, c := range held {
			c.Release()
		}
	}()

	// Heartbeats are every 200 ms here; two more must land within the deadline.
	beats := 0
	apptest.WaitUntil(t, 10*time.Second, "two heartbeats while the main pool was exhausted", func() bool {
		var at time.Time
		require.NoError(t, s.Pool.QueryRow(ctx, "SELECT heartbeat_at FROM worker WHERE id = $1", w.ID()).Scan(&at))
		if at.After(before) {
			beats++
			before = at
		}
		return beats >= 2
	})
}

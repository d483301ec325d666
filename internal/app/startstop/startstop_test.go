// Package startstop_test starts and stops every process role again and
// again in a test binary of its own: a goroutine left behind by a role is
// then the role's, not another test's.
package startstop_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/sql/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// role is the one lifecycle shape every process role has.
type role interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// Each role (the api with its HTTP server, the worker with its admin
// server, the CLI) starts and stops ten times in a row, as River's
// startstoptest.Stress puts a service through its paces, and once stopped
// leaves no goroutine of its own behind: its loops, servers, River client
// and River UI all end with Stop.
func TestRoles_StartStopLeavesNothingBehind(t *testing.T) {
	s := apptest.New(t, nil)
	ctx := context.Background()
	api, err := app.NewAPI(s.APIPool, s.Env, s.Tel, app.APIOptions{HTTPAddr: "127.0.0.1:0"})
	require.NoError(t, err)
	worker, err := app.NewWorker(s.Pool, s.Env, s.Tel, app.WorkerOptions{AdminAddr: "127.0.0.1:0"})
	require.NoError(t, err)
	id, hostname, boot := app.NewWorkerID()
	cli, err := app.NewCLI(s.Pool, s.Pool, s.Env, s.Tel, id, hostname, boot)
	require.NoError(t, err)
	// What runs now is the harness's (its pools, its own api role, its
	// telemetry), not the roles under test.
	harness := goleak.IgnoreCurrent()

	for _, r := range []struct {
		name string
		role role
	}{{"api", api}, {"worker", worker}, {"cli", cli}} {
		t.Run(r.name, func(t *testing.T) {
			for range 10 {
				require.NoError(t, r.role.Start(ctx))
				require.NoError(t, r.role.Stop(ctx))
			}
			goleak.VerifyNone(t, harness, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
		})
	}
}

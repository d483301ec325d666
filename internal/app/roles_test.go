package app_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/internal/apptest"
)

// Each process role builds one River client and one request owner (which
// is also its reaper), and hands them down: the worker's owner inserts
// through the River client that works its queues. Before, the api role
// made 2 River clients, 4 Enqueuers and 3 Reapers.
func TestRoles_BuildOneOfEach(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	one := func(t *testing.T, built app.Census) {
		t.Helper()
		require.Equal(t, 1, built.RiverClients, "River clients")
		require.Equal(t, 1, built.Owners, "request owners")
	}

	t.Run("api", func(t *testing.T) {
		role, err := app.NewAPI(s.APIPool, s.Env, s.Tel, app.APIOptions{})
		require.NoError(t, err)
		one(t, role.Built())
	})
	t.Run("worker", func(t *testing.T) {
		w, built, err := app.NewWorkerCounted(s.Pool, s.Env, s.Tel, app.WorkerOptions{})
		require.NoError(t, err)
		one(t, built)
		require.Same(t, w.River(), built.OwnerRiver, "the owner inserts through the client that works the queues")
	})
	t.Run("cli", func(t *testing.T) {
		id, hostname, boot := app.NewWorkerID()
		cli, err := app.NewCLI(s.Pool, s.Pool, s.Env, s.Tel, id, hostname, boot)
		require.NoError(t, err)
		one(t, cli.Built())
	})
}

// The census above counts the constructors the roles call; this pins that
// they are the only ones: River clients, request owners and runners are
// made in one place each for the roles without a worker (internal/app) and
// one for the worker (queue/worker, where its River client, owner and
// runner are built together), and cmd/radar makes none of its own.
func TestRoles_OnePlaceBuildsEach(t *testing.T) {
	t.Parallel()
	count := func(dir, call string) int {
		t.Helper()
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		n := 0
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			n += strings.Count(string(src), call)
		}
		return n
	}
	require.Equal(t, 1, count(".", "river.NewClient("), "internal/app: the insert-only client")
	require.Equal(t, 1, count("../../queue/worker", "river.NewClient("), "queue/worker: the worker's client")
	require.Equal(t, 1, count(".", "request.NewOwner("), "internal/app: the api's and the CLI's owner")
	require.Equal(t, 1, count("../../queue/worker", "request.NewOwner("), "queue/worker: the worker's owner")
	for _, call := range []string{"river.NewClient(", "request.NewOwner(", "batch.NewRunner("} {
		require.Zero(t, count("../../cmd/radar", call), "cmd/radar only wires roles: %s", call)
	}
	require.Equal(t, 1, count(".", "batch.NewRunner("), "internal/app: the CLI's runner")
	require.Equal(t, 1, count("../../queue/worker", "batch.NewRunner("), "queue/worker: the worker's runner")
}

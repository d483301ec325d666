package main

import (
	"context"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"
)

// Fencing, through the CLI: the execution of a `radar run` is set ABANDONED
// (as a reaper would) while a chunk is in flight; the run gets no further
// commit, ends saying its ownership was lost, and exits 1.
func TestFencing_CLIOwnershipLost(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := apptest.New(t, nil)
	s.Gate.Arm(2) // chunks 1 and 2 commit, chunk 3's call is held
	cli := startRadar(t, bin, s.ProcessEnv(nil), "run", "aptTrade", "-p", "regions=11110", "-p", "from=2025-01", "-p", "to=2025-06")
	apptest.Within(t, time.Minute, s.Gate.Blocked, "the third provider call")

	var requestID int64
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT id FROM job_request WHERE source = 'cli'`).Scan(&requestID))
	s.AbandonRequest(requestID, "abandoned by the test")
	s.Gate.Open()

	require.Equal(t, exitFailed, cli.Wait(t, time.Minute), cli.Output())
	require.Contains(t, cli.Output(), "ownership lost")
	require.Contains(t, cli.Output(), "ownership of the execution lost")
	require.Equal(t, 2, s.Count("SELECT count(*) FROM job_checkpoint"), "no commit after the execution was abandoned")
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM job_execution WHERE status = 'ABANDONED' AND chunks_done = 2 AND exit_message = 'abandoned by the test'`))
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM job_request WHERE status = 'FAILED' AND message = 'abandoned by the test'`))
	require.Equal(t, 0, s.Count(`SELECT count(*) FROM job_request WHERE source = 'chain'`))
}

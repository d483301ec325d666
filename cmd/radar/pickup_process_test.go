package main

import (
	"context"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs/riskmetric"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/worker"
)

// `radar run`'s chained request is claimed on its notification: the CLI
// runs its own request in the foreground, and the request the run chains
// to is inserted through the CLI's insert-only River client, whose insert
// notifies the worker (poll at an hour here).
func TestPickup_CLIChainedInsertIsNotified(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := apptest.New(t, nil)
	s.StartWorkerWith(s.Pool, func(wc *worker.Config, rc *batch.Config) {
		wc.FetchPollInterval = time.Hour
		rc.Jobs[riskrule.Name] = apptest.NoopJob{}
	})
	ctx := context.Background()
	// One tracked company with no data: metrics completes, and chains.
	testfactory.Company(ctx, t, s.Pool, &testfactory.CompanyOpts{CorpCode: "00000001", Name: "pickup"})
	cli := startRadar(t, bin, s.ProcessEnv(nil), "run", riskmetric.Name)
	require.Equal(t, exitOK, cli.Wait(t, time.Minute))

	var chained string
	require.NoError(t, s.Pool.QueryRow(ctx, "SELECT id::text FROM job_request WHERE job = $1 AND source = 'chain'", riskrule.Name).Scan(&chained))
	apptest.WaitClaimed(t, s, chained)
}

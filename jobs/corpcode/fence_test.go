package corpcode_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/jobs/corpcode"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtest"
	"github.com/buildrisk/radar/upstream"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// takenOverJob is corpCodeSync whose run is taken over just before it
// plans: takeover runs first, in the run's Plan.
type takenOverJob struct {
	corpcode.Job
	takeover func(run *batch.Run)
}

func (j takenOverJob) Plan(ctx context.Context, run *batch.Run) (*batch.Plan, error) {
	j.takeover(run)
	return j.Job.Plan(ctx, run)
}

// A run that lost its execution (the reaper abandoned it, and a new
// execution of the same instance recorded its own download) does not
// overwrite the new execution's download record: the record is written in
// a transaction fenced on the execution.
func TestCorpCodeSync_StaleDownloadLeavesTheNewExecutionsRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	server := httptest.NewServer(fakeupstream.New(fakeupstream.Config{}))
	t.Cleanup(server.Close)
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	urls := map[upstream.Provider]string{}
	for _, p := range upstream.Providers {
		urls[p] = server.URL
	}
	client, err := upstream.NewClient(pool, upstream.ClientConfig{
		BaseURLs: urls, Keys: map[upstream.Provider]string{upstream.ProviderDART: "test-dart-key"},
		Instruments: instruments, AllowHTTP: true,
	})
	require.NoError(t, err)
	enqueuer, err := request.NewOwner(pool, nil, request.Config{Catalog: catalog.NewCatalog(corpcode.Spec()), Instruments: instruments, Logger: logger})
	require.NoError(t, err)

	q := queries.New()
	successor := &queries.CorpCodeDownloadUpsertParams{
		Path: t.TempDir() + "/corpcode-successor.zip", Sha256: "successor", SizeBytes: 1, Companies: 1,
	}
	job := takenOverJob{Job: corpcode.Job{Dir: t.TempDir()}, takeover: func(run *batch.Run) {
		n, err := q.JobExecutionAbandon(ctx, pool, &queries.JobExecutionAbandonParams{ID: run.ExecutionID, ExitMessage: "worker gone"})
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		epoch, err := q.JobInstanceTakeLease(ctx, pool, run.InstanceID)
		require.NoError(t, err)
		_, err = q.JobExecutionInsert(ctx, pool, &queries.JobExecutionInsertParams{
			InstanceID: run.InstanceID, Job: corpcode.Name, RequestID: run.RequestID, WorkerID: "2@test#boot", LeaseEpoch: epoch,
		})
		require.NoError(t, err)
		successor.InstanceID = run.InstanceID
		require.NoError(t, q.CorpCodeDownloadUpsert(ctx, pool, successor))
	}}
	runner, err := batch.NewRunner(pool, batch.Config{Owner: enqueuer,
		WorkerID: "1@test#boot", Jobs: map[string]batch.Job{corpcode.Name: job},
		Upstream: client, Instruments: instruments, Logger: logger,
	})
	require.NoError(t, err)
	res, err := enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: corpcode.Name, Source: radartype.SourceCLI, Params: []byte(`{}`)})
	require.NoError(t, err)
	_, err = runner.Run(ctx, batch.RunOpts{RequestID: res.Request.ID})
	require.ErrorIs(t, err, batch.ErrOwnershipLost)

	rec, err := q.CorpCodeDownloadGet(ctx, pool, successor.InstanceID)
	require.NoError(t, err)
	require.Equal(t, successor.Path, rec.Path, "the stale run overwrote the new execution's download record")
	require.Equal(t, successor.Sha256, rec.Sha256)
}

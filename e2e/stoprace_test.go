package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtest"
)

// A stop that races the run's end, driven by a latch inside the
// transaction that records the outcome (COMPLETED written, the row locked,
// not committed): the stop waits for the row, and when the outcome commits
// it finds the run ended and answers 409; the execution stays COMPLETED,
// never STOPPING, and the job's next request runs.
func TestStopRace_StopAfterTheLastChunkLoses(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.StartWorkerWith(s.Pool, func(_ *worker.Config, rc *batch.Config) {
		rc.OutcomeHook = func() {
			once.Do(func() {
				close(entered)
				<-release
			})
		}
	})
	// Registered after the worker's own cleanup, so it runs first: a failed
	// test releases the run, and the worker can drain.
	var releaseOnce sync.Once
	releaseRun := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseRun)
	body := apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-02")
	id := s.RequestAptTrade(body)
	apptest.Within(t, time.Minute, entered, "the run to write its outcome")
	// The stop runs as the api's role; only a superuser sees the query and
	// wait of another role's session in pg_stat_activity.
	admin, err := pgxpool.New(context.Background(), pgtest.AdminURL(t))
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	database := s.Pool.Config().ConnConfig.Database

	type answer struct {
		status int
		body   map[string]any
	}
	stopped := make(chan answer, 1)
	go func() {
		status, out := s.Post("/v1/jobs/aptTrade/stop", "")
		stopped <- answer{status, out}
	}()
	apptest.WaitUntil(t, time.Minute, "the stop to wait for the execution's row", func() bool {
		var waiting int
		require.NoError(t, admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = $1 AND wait_event_type = 'Lock' AND query LIKE '%STOPPING%'`, database).Scan(&waiting))
		return waiting == 1
	})
	releaseRun()
	var stop answer
	select {
	case stop = <-stopped:
	case <-time.After(time.Minute):
		t.Fatal("no answer to the stop within a minute")
	}
	require.Equal(t, http.StatusConflict, stop.status, "the run already ended: %v", stop.body)

	done := s.WaitRequest(id, "DONE", "FAILED")
	require.Equal(t, "COMPLETED", apptest.Execution(t, done)["status"], "%v", done)
	require.Zero(t, s.Count(`SELECT count(*) FROM job_execution WHERE status = 'STOPPING'`), "no execution left STOPPING")

	next := s.RequestAptTrade(body)
	again := s.WaitRequest(next, "DONE", "FAILED")
	require.Equal(t, "DONE", again["status"], "%v", again)
}

// A request that meets an execution of its job still STOPPING (its run has
// not ended yet) waits for it, QUEUED, its River job snoozed, instead of
// failing at start ("execution N is still STOPPING"); once the execution
// ends, it runs.
func TestStopRace_RequestWaitsForAStoppingExecution(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	w, _ := s.StartWorker()
	ctx := context.Background()
	// The state a stop racing the end used to leave: the execution still
	// STOPPING, its request already finished.
	finished := testfactory.Request(ctx, t, s.Pool, &testfactory.RequestOpts{Job: "aptTrade", RequestedBy: "test", EstimatedCalls: 1, Status: radartype.RequestDone})
	execID := testfactory.Execution(ctx, t, s.Pool, &testfactory.ExecutionOpts{
		InstanceID: testfactory.Instance(ctx, t, s.Pool, &testfactory.InstanceOpts{Job: "aptTrade", ParamsHash: "other"}).ID,
		RequestID:  finished.ID, Unlinked: true, WorkerID: w.ID(), Status: radartype.ExecutionStopping,
	}).ID

	id := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-02"))
	var riverJobID int64
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT river_job_id FROM job_request WHERE id = $1::bigint`, id).Scan(&riverJobID))
	apptest.WaitUntil(t, time.Minute, "the request's River job to be snoozed twice", func() bool {
		_, out := s.Get("/v1/requests/" + id)
		require.Equal(t, "QUEUED", out["status"], "the request waits, it never fails at start: %v", out)
		job, err := w.River().JobGet(ctx, riverJobID)
		require.NoError(t, err)
		var meta struct {
			Snoozes int `json:"snoozes"`
		}
		require.NoError(t, json.Unmarshal(job.Metadata, &meta))
		return meta.Snoozes >= 2
	})

	testfactory.FinishExecution(ctx, t, s.Pool, execID, &testfactory.FinishOpts{Status: radartype.ExecutionStopped, KeepRequest: true})
	done := s.WaitRequest(id, "DONE", "FAILED")
	require.Equal(t, "COMPLETED", apptest.Execution(t, done)["status"], "%v", done)
}

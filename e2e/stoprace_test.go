package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtest"
)

// holdCompletions makes every transaction that records an execution
// COMPLETED wait, after its write and before its commit (the execution's
// row written and locked), until release: a trigger of the test's own on
// the test's database takes an advisory lock that a connection of the test
// holds. waiting reports whether such a transaction waits now.
func holdCompletions(t *testing.T, s *apptest.System) (waiting func() bool, release func()) {
	t.Helper()
	ctx := context.Background()
	holder, err := pgx.Connect(ctx, s.OwnerURL) // the schema's owner may add a trigger
	require.NoError(t, err)
	const key = 7_300_451 // the advisory lock of this test's trigger
	_, err = holder.Exec(ctx, fmt.Sprintf(`
		CREATE FUNCTION test_hold_completion() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM pg_advisory_xact_lock(%d);
			RETURN NULL;
		END $$;
		CREATE TRIGGER test_hold_completion AFTER UPDATE OF status ON job_execution FOR EACH ROW
			WHEN (NEW.status = 'COMPLETED' AND OLD.status IS DISTINCT FROM 'COMPLETED')
			EXECUTE FUNCTION test_hold_completion()`, key))
	require.NoError(t, err)
	_, err = holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, key)
	require.NoError(t, err)
	var once sync.Once
	release = func() { once.Do(func() { _ = holder.Close(ctx) }) } // closing the session frees its lock
	waiting = func() bool {
		var n int
		require.NoError(t, s.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND objid = $1 AND NOT granted
			  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, key).Scan(&n))
		return n > 0
	}
	return waiting, release
}

// A stop that races the run's end, driven by a lock inside the
// transaction that records the outcome (COMPLETED written, the row locked,
// not committed): the stop waits for the row, and when the outcome commits
// it finds the run ended and answers 409; the execution stays COMPLETED,
// never STOPPING, and the job's next request runs.
func TestStopRace_StopAfterTheLastChunkLoses(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	s.StartWorker()
	// Registered after the worker's own cleanup, so it runs first: a failed
	// test releases the run, and the worker can drain.
	held, releaseRun := holdCompletions(t, s)
	t.Cleanup(releaseRun)
	body := apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-02")
	id := s.RequestAptTrade(body)
	apptest.WaitUntil(t, time.Minute, "the run to write its outcome", held)
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
			WHERE datname = $1 AND wait_event_type = 'Lock' AND wait_event <> 'advisory' AND query LIKE '%STOPPING%'`, database).Scan(&waiting))
		return waiting == 1
	})
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM job_execution WHERE status IN ('STARTING', 'STARTED')`),
		"the outcome is not committed while the stop waits")
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

package app_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/internal/jobset"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/api"
	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/radartype"
)

// A worker restarted in the same pid@hostname slot finalizes the previous
// boot's requests at once, without waiting for the stale window.
func TestRegistry_PreviousBootCleanup(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_STALE_AFTER": "1h"}})
	hostname, _ := os.Hostname()
	if hostname == "" {
		hostname = "localhost"
	}
	previous := fmt.Sprintf("%d@%s#0ldb00t", os.Getpid(), hostname)
	requestID, _ := s.InsertRunning(previous, time.Now())

	s.StartWorker()
	var status, message, execStatus string
	require.NoError(t, s.Pool.QueryRow(context.Background(),
		`SELECT r.status, r.message, e.status FROM job_request r JOIN job_execution e ON e.id = r.execution_id WHERE r.id = $1`,
		requestID).Scan(&status, &message, &execStatus))
	require.Equal(t, "FAILED", status, "finalized at start, not after the 1h stale window")
	require.Contains(t, message, previous)
	require.Equal(t, "ABANDONED", execStatus)
	require.Equal(t, float64(1), s.Metric("buildrisk_worker_stale_heartbeats_total", nil))
}

// Manual cleanup only for stale workers: a live one is 409 with the worker
// id and its heartbeat age; a stale one is 200 and frees the job.
func TestRegistry_Abandon(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	_, liveExec := s.InsertRunning("1@live#a", time.Now())
	status, out := s.Post(fmt.Sprintf("/v1/executions/%d/abandon", liveExec), "")
	require.Equal(t, http.StatusConflict, status, "%v", out)
	require.Contains(t, out["detail"], "1@live#a")
	require.Contains(t, out["detail"], "ago")

	testfactory.WorkerHeartbeatAge(context.Background(), t, s.Pool, "", time.Hour)
	status, out = s.Post(fmt.Sprintf("/v1/executions/%d/abandon", liveExec), "")
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.Equal(t, "ABANDONED", out["status"])
	require.Equal(t, 0, s.Count("SELECT count(*) FROM job_request WHERE status IN ('QUEUED','RUNNING')"))

	status, _ = s.Post(fmt.Sprintf("/v1/executions/%d/abandon", liveExec), "")
	require.Equal(t, http.StatusConflict, status, "already ABANDONED")
	status, _ = s.Post("/v1/executions/999999/abandon", "")
	require.Equal(t, http.StatusNotFound, status)
	status, _ = s.Do(http.MethodPost, fmt.Sprintf("/v1/executions/%d/abandon", liveExec), apptest.ViewerToken, "")
	require.Equal(t, http.StatusForbidden, status)
}

// GET /v1/jobs answers with one SQL statement, and its definitions are the
// job repository's, pinned by values: last = the newest execution of the
// newest instance; running = STARTING|STARTED|STOPPING; heartbeat = the
// running execution's last_updated; keys from live workers only.
func TestRegistry_JobListOneStatement(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	ctx := context.Background()
	run := func(opts *testfactory.ExecutionOpts) int64 {
		opts.WorkerID, opts.KeepRequest = "w", true
		return testfactory.Execution(ctx, t, s.Pool, opts).ID
	}
	req := testfactory.Request(ctx, t, s.Pool, &testfactory.RequestOpts{Job: "aptTrade", Status: radartype.RequestDone}).ID
	older := testfactory.Instance(ctx, t, s.Pool, &testfactory.InstanceOpts{Job: "aptTrade", ParamsHash: "a"}).ID
	newer := testfactory.Instance(ctx, t, s.Pool, &testfactory.InstanceOpts{Job: "aptTrade", ParamsHash: "b"}).ID
	// The newer instance's newest execution (id lower than the older
	// instance's last one) is "last"; the older instance's newest is not.
	newest := run(&testfactory.ExecutionOpts{InstanceID: newer, RequestID: req, Status: radartype.ExecutionStopped})
	run(&testfactory.ExecutionOpts{InstanceID: older, RequestID: req, Status: radartype.ExecutionFailed})

	var queriesSeen atomic.Int32
	apiPool := s.CountingPool(&queriesSeen)
	server, err := api.New(apiPool, api.Config{
		Tokens: map[string]api.Role{"t": api.RoleViewer}, Catalog: jobset.Catalog(), AlertRules: riskrule.Doc(), Requests: mustEnqueuer(t, s),
		Instruments: s.Tel.Instruments, StaleAfter: 2 * time.Second,
	})
	require.NoError(t, err)
	get := func() map[string]any {
		rec := &bytes.Buffer{}
		req, _ := http.NewRequest(http.MethodGet, "/v1/jobs", nil)
		req.Header.Set("Authorization", "Bearer t")
		w := newRecorder(rec)
		queriesSeen.Store(0)
		server.Handler().ServeHTTP(w, req)
		require.Equal(t, 200, w.status, rec.String())
		require.Equal(t, int32(1), queriesSeen.Load(), "one statement")
		return apptest.DecodeJobs(t, rec.Bytes())
	}

	job := get()
	require.Equal(t, false, job["running"])
	last := job["lastExecution"].(map[string]any)
	require.Equal(t, fmt.Sprint(newest), last["id"])
	require.Equal(t, "STOPPED", last["status"])
	require.Nil(t, job["heartbeatAgeSeconds"])
	require.Equal(t, false, job["keysConfigured"], "no live worker reported BUILDRISK_KEY_MOLIT")

	running := run(&testfactory.ExecutionOpts{InstanceID: newer, RequestID: req, Status: radartype.ExecutionStopping, LastUpdatedAge: 42 * time.Second})
	active := testfactory.Request(ctx, t, s.Pool, &testfactory.RequestOpts{Job: "aptTrade", Status: radartype.RequestRunning}).ID
	testfactory.Worker(ctx, t, s.Pool, &testfactory.WorkerOpts{ID: "1@h#b", ConfiguredKeys: []string{"BUILDRISK_KEY_MOLIT"}})
	testfactory.Worker(ctx, t, s.Pool, &testfactory.WorkerOpts{ID: "2@h#b", ConfiguredKeys: []string{"BUILDRISK_KEY_DART"}, HeartbeatAge: time.Hour})

	job = get()
	require.Equal(t, true, job["running"], "STOPPING counts as running")
	require.Equal(t, fmt.Sprint(running), job["lastExecution"].(map[string]any)["id"])
	require.InDelta(t, 42, job["heartbeatAgeSeconds"], 5)
	require.Equal(t, fmt.Sprint(active), job["activeRequestId"])
	require.Equal(t, true, job["keysConfigured"])
	require.Equal(t, []any{"BUILDRISK_KEY_MOLIT"}, job["requiredKeys"])
}

// GET /v1/workers lists key names, never values; neither do the logs.
func TestRegistry_WorkersShowKeyNamesOnly(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	var logs apptest.SyncBuffer
	s.Tel = &app.Telemetry{Providers: s.Tel.Providers, Instruments: s.Tel.Instruments, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	w, _ := s.StartWorker()
	s.WaitRequest(s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01")), "DONE")

	raw := s.Raw("/v1/workers")
	require.Contains(t, raw, w.ID())
	require.Contains(t, raw, "BUILDRISK_KEY_MOLIT")
	for _, secret := range []string{"test-molit-key", "test-dart-key", "test-krx-key", "test-credit-key"} {
		require.NotContains(t, raw, secret)
		require.NotContains(t, logs.String(), secret)
	}
	_, out := s.Get("/v1/workers")
	workers := out["workers"].([]any)
	require.Len(t, workers, 1)
	require.Equal(t, true, workers[0].(map[string]any)["alive"])
	require.NoError(t, w.Ready(context.Background()))
}

// Result recording survives a database outage: with the worker's database
// cut for less than the retry window the outcome is recorded once it is
// back, by the retry alone (the reconcile loop is off); cut for longer
// than the window (500 ms against a 2 s cut), the outcome waits in the
// worker, still held, and the reconcile loop records it once the database
// is back: the same outcome, never an abandon. Either way the execution's
// end and the request's end are one transaction, so neither is seen
// without the other, and the River job that delivered the run ended at its
// claim: none is left running.
func TestRegistry_ResultRecordingOutage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		outage       time.Duration
		recordWindow time.Duration
		reconcile    time.Duration
	}{
		{"ShortOutage_RecordedWhenBack", 700 * time.Millisecond, 20 * time.Second, time.Hour},
		{"LongOutage_Reconciled", 2 * time.Second, 500 * time.Millisecond, 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// A stale window longer than the outage: only the retry or the
			// reconcile loop may finalize, never the reaper.
			s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_STALE_AFTER": "1m"}})
			proxy := apptest.NewCutProxy(t, s.DBURL)
			workerPool, err := pgxpool.New(context.Background(), proxy.URL)
			require.NoError(t, err)
			t.Cleanup(workerPool.Close)

			s.StartWorkerWith(workerPool, func(wc *worker.Config, rc *batch.Config) {
				wc.ReconcileInterval = tc.reconcile
				rc.RecordRetryWindow = tc.recordWindow
			})
			s.Gate.Arm(0) // the first provider call is held: the run has claimed the request
			id := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-02"))
			apptest.Within(t, time.Minute, s.Gate.Blocked, "the first provider call")
			// The test holds the request's row: the run's recording (the
			// execution's end, then the request's, in one transaction)
			// waits for it. The database is cut there.
			ctx := context.Background()
			hold, err := s.Pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = hold.Rollback(ctx) }()
			_, err = hold.Exec(ctx, `SELECT 1 FROM job_request WHERE id = $1::bigint FOR NO KEY UPDATE`, id)
			require.NoError(t, err)
			s.Gate.Open()
			apptest.WaitUntil(t, time.Minute, "the recording to wait for the request's row", func() bool {
				return s.Count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
					AND wait_event_type = 'Lock' AND query LIKE '%JobRequestFinish%'`) == 1
			})
			proxy.Cut()
			time.AfterFunc(tc.outage, proxy.Restore)
			require.NoError(t, hold.Rollback(ctx)) // the cut connection's statement can commit nothing
			_, during := s.Get("/v1/requests/" + id)
			require.Equal(t, "RUNNING", during["status"], "the request outcome is not recorded while the database is cut")
			require.NotEqual(t, "COMPLETED", apptest.Execution(t, during)["status"], "nor the execution's: the two are one transaction")

			done := s.WaitRequest(id, "DONE", "FAILED")
			require.Equal(t, "DONE", done["status"])
			require.Contains(t, done["message"], "completed")
			require.Equal(t, "COMPLETED", apptest.Execution(t, done)["status"])
			require.Zero(t, s.Count("SELECT count(*) FROM river_job WHERE state = 'running'"), "the delivery ended at the claim")
			require.Equal(t, 1, s.Count("SELECT count(*) FROM river_job WHERE state = 'completed'"))
			s.RequireRequestsAgreeWithRiver()
		})
	}
}

func mustEnqueuer(t *testing.T, s *apptest.System) *apptest.RequestEnqueuer {
	t.Helper()
	return s.Role.Owner()
}

type recorder struct {
	header http.Header
	body   *bytes.Buffer
	status int
}

func newRecorder(body *bytes.Buffer) *recorder {
	return &recorder{header: http.Header{}, body: body, status: 200}
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) Write(p []byte) (int, error) { return r.body.Write(p) }

func (r *recorder) WriteHeader(status int) { r.status = status }

// A worker that died after River handed it the job but before it started
// the run leaves a QUEUED request behind a running River job; a River job
// that ended without running leaves a QUEUED request too. Neither blocks
// the job: the next request's cleanup fails the old one, cancels its River
// job through River's API, and the message says what happened. Both
// situations are made with River's public API: a River client whose worker
// id no live worker has, and River's JobCancel.
func TestRegistry_OrphanedQueuedRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := apptest.New(t, nil)
	body := apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01")
	riverJobOf := func(requestID string) int64 {
		var id int64
		require.NoError(t, s.Pool.QueryRow(ctx, "SELECT river_job_id FROM job_request WHERE id = $1", requestID).Scan(&id))
		return id
	}
	finish := func(requestID string) {
		t.Helper()
		id, err := strconv.ParseInt(requestID, 10, 64)
		require.NoError(t, err)
		_, err = queries.New().JobRequestFinish(ctx, s.Pool, &queries.JobRequestFinishParams{ID: id, Status: string(radartype.RequestDone)})
		require.NoError(t, err)
	}

	// A worker that fetched the job and died (no heartbeat ever).
	held := &apptest.HeldRun{Fetched: make(chan int64, 4)}
	workers := river.NewWorkers()
	river.AddWorker(workers, river.Worker[catalog.RequestArgs](held))
	dead, err := river.NewClient(riverpgxv5.New(s.Pool), &river.Config{
		ID: "9@dead-host#b00t", Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}}, Workers: workers,
		FetchCooldown: river.FetchCooldownMin, FetchPollInterval: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, dead.Start(ctx))
	first := s.RequestAptTrade(body)
	select {
	case id := <-held.Fetched:
		require.Equal(t, riverJobOf(first), id)
	case <-time.After(30 * time.Second):
		t.Fatal("the River client did not fetch the request's job within 30s")
	}
	second := s.RequestAptTrade(body) // 202: the cleanup under the lock freed the job
	require.NotEqual(t, first, second)
	_, old := s.Get("/v1/requests/" + first)
	require.Equal(t, "FAILED", old["status"])
	require.Contains(t, old["message"], "worker 9@dead-host#b00t stopped heartbeating (last heartbeat never) before it started the run")
	finish(second)
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, dead.StopAndCancel(stopCtx))
	s.Eventually("River to end the dead worker's job cancelled", func() bool {
		return s.Count("SELECT count(*) FROM river_job WHERE id = $1 AND state = 'cancelled'", riverJobOf(first)) == 1
	})

	// A River job that ended without running.
	third := s.RequestAptTrade(body)
	_, err = dead.JobCancel(ctx, riverJobOf(third))
	require.NoError(t, err)
	fourth := s.RequestAptTrade(body)
	require.NotEqual(t, third, fourth)
	_, old = s.Get("/v1/requests/" + third)
	require.Equal(t, "FAILED", old["status"])
	require.Contains(t, old["message"], "no worker will run it")
	finish(fourth)

	require.Equal(t, float64(1), s.Metric("buildrisk_requests_failed_total", map[string]string{"job": "aptTrade", "reason": "orphaned"}),
		"the orphaned request failed is counted")
	require.Equal(t, float64(1), s.Metric("buildrisk_worker_stale_heartbeats_total", nil),
		"the dead worker's request is counted as a stale worker's")
}

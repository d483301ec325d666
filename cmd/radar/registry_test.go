package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/api"
	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/jobs"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/worker"
)

// A worker restarted in the same pid@hostname slot finalizes the previous
// boot's requests at once, without waiting for the stale window.
func TestRegistry_PreviousBootCleanup(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, &testSystemOpts{env: map[string]string{"BUILDRISK_STALE_AFTER": "1h"}})
	hostname, _ := os.Hostname()
	if hostname == "" {
		hostname = "localhost"
	}
	previous := fmt.Sprintf("%d@%s#0ldb00t", os.Getpid(), hostname)
	requestID, _ := s.insertRunning(previous, time.Now())

	s.startWorker()
	var status, message, execStatus string
	require.NoError(t, s.pool.QueryRow(context.Background(),
		`SELECT r.status, r.message, e.status FROM job_request r JOIN job_execution e ON e.id = r.execution_id WHERE r.id = $1`,
		requestID).Scan(&status, &message, &execStatus))
	require.Equal(t, "FAILED", status, "finalized at start, not after the 1h stale window")
	require.Contains(t, message, previous)
	require.Equal(t, "ABANDONED", execStatus)
	require.Equal(t, float64(1), s.metric("buildrisk_worker_stale_heartbeats_total", nil))
}

// insertRunning records an aptTrade request RUNNING on workerID with a
// STARTED execution and a heartbeat at heartbeatAt.
func (s *testSystem) insertRunning(workerID string, heartbeatAt time.Time) (requestID, executionID int64) {
	s.t.Helper()
	ctx := context.Background()
	_, err := s.pool.Exec(ctx, `INSERT INTO worker (id, hostname, pid, boot, heartbeat_at, started_at)
		VALUES ($1, 'h', 1, 'b', $2, $2) ON CONFLICT (id) DO UPDATE SET heartbeat_at = $2`, workerID, heartbeatAt)
	require.NoError(s.t, err)
	require.NoError(s.t, s.pool.QueryRow(ctx, `INSERT INTO job_request (job, params, params_hash, source, status, worker_id, claimed_at)
		VALUES ('aptTrade', '{}', 'h', 'api', 'RUNNING', $1, now()) RETURNING id`, workerID).Scan(&requestID))
	var instanceID int64
	require.NoError(s.t, s.pool.QueryRow(ctx, `INSERT INTO job_instance (job, params, params_hash) VALUES ('aptTrade', '{}', 'h') RETURNING id`).Scan(&instanceID))
	require.NoError(s.t, s.pool.QueryRow(ctx, `INSERT INTO job_execution (instance_id, job, request_id, status, worker_id, started_at)
		VALUES ($1, 'aptTrade', $2, 'STARTED', $3, now()) RETURNING id`, instanceID, requestID, workerID).Scan(&executionID))
	_, err = s.pool.Exec(ctx, `UPDATE job_request SET execution_id = $1 WHERE id = $2`, executionID, requestID)
	require.NoError(s.t, err)
	return requestID, executionID
}

// Manual cleanup only for stale workers: a live one is 409 with the worker
// id and its heartbeat age; a stale one is 200 and frees the job.
func TestRegistry_Abandon(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, nil)
	_, liveExec := s.insertRunning("1@live#a", time.Now())
	status, out := s.post(fmt.Sprintf("/v1/executions/%d/abandon", liveExec), "")
	require.Equal(t, http.StatusConflict, status, "%v", out)
	require.Contains(t, out["detail"], "1@live#a")
	require.Contains(t, out["detail"], "ago")

	_, err := s.pool.Exec(context.Background(), `UPDATE worker SET heartbeat_at = now() - interval '1 hour'`)
	require.NoError(t, err)
	status, out = s.post(fmt.Sprintf("/v1/executions/%d/abandon", liveExec), "")
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.Equal(t, "ABANDONED", out["status"])
	require.Equal(t, 0, s.count("SELECT count(*) FROM job_request WHERE status IN ('QUEUED','RUNNING')"))

	status, _ = s.post(fmt.Sprintf("/v1/executions/%d/abandon", liveExec), "")
	require.Equal(t, http.StatusConflict, status, "already ABANDONED")
	status, _ = s.post("/v1/executions/999999/abandon", "")
	require.Equal(t, http.StatusNotFound, status)
	status, _ = s.do(http.MethodPost, fmt.Sprintf("/v1/executions/%d/abandon", liveExec), testViewerToken, "")
	require.Equal(t, http.StatusForbidden, status)
}

// GET /v1/jobs answers with one SQL statement, and its definitions are the
// job repository's, pinned by values: last = the newest execution of the
// newest instance; running = STARTING|STARTED|STOPPING; heartbeat = the
// running execution's last_updated; keys from live workers only.
func TestRegistry_JobListOneStatement(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, nil)
	ctx := context.Background()
	exec := func(sql string, args ...any) int64 {
		var id int64
		require.NoError(t, s.pool.QueryRow(ctx, sql, args...).Scan(&id))
		return id
	}
	req := exec(`INSERT INTO job_request (job, params, source, status) VALUES ('aptTrade', '{}', 'api', 'DONE') RETURNING id`)
	older := exec(`INSERT INTO job_instance (job, params, params_hash) VALUES ('aptTrade', '{}', 'a') RETURNING id`)
	newer := exec(`INSERT INTO job_instance (job, params, params_hash) VALUES ('aptTrade', '{}', 'b') RETURNING id`)
	// The newer instance's newest execution (id lower than the older
	// instance's last one) is "last"; the older instance's newest is not.
	newest := exec(`INSERT INTO job_execution (instance_id, job, request_id, status, worker_id, started_at, ended_at)
		VALUES ($1, 'aptTrade', $2, 'STOPPED', 'w', now() - interval '2 hours', now() - interval '1 hour') RETURNING id`, newer, req)
	exec(`INSERT INTO job_execution (instance_id, job, request_id, status, worker_id) VALUES ($1, 'aptTrade', $2, 'FAILED', 'w') RETURNING id`, older, req)

	var queriesSeen atomic.Int32
	apiPool := s.countingPool(&queriesSeen)
	server, err := api.New(apiPool, api.Config{
		Tokens: map[string]api.Role{"t": api.RoleViewer}, Catalog: jobs.Default(), Enqueuer: mustEnqueuer(t, s),
		Instruments: s.tel.Instruments, StaleAfter: 2 * time.Second,
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
		return decodeJobs(t, rec.Bytes())
	}

	job := get()
	require.Equal(t, false, job["running"])
	last := job["lastExecution"].(map[string]any)
	require.Equal(t, fmt.Sprint(newest), last["id"])
	require.Equal(t, "STOPPED", last["status"])
	require.Nil(t, job["heartbeatAgeSeconds"])
	require.Equal(t, false, job["keysConfigured"], "no live worker reported BUILDRISK_KEY_MOLIT")

	running := exec(`INSERT INTO job_execution (instance_id, job, request_id, status, worker_id, last_updated)
		VALUES ($1, 'aptTrade', $2, 'STOPPING', 'w', now() - interval '42 seconds') RETURNING id`, newer, req)
	active := exec(`INSERT INTO job_request (job, params, source, status) VALUES ('aptTrade', '{}', 'api', 'RUNNING') RETURNING id`)
	_, err = s.pool.Exec(ctx, `INSERT INTO worker (id, hostname, pid, boot, configured_keys) VALUES ('1@h#b', 'h', 1, 'b', '{BUILDRISK_KEY_MOLIT}'),
		('2@h#b', 'h', 2, 'b', '{BUILDRISK_KEY_DART}')`)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, `UPDATE worker SET heartbeat_at = now() - interval '1 hour' WHERE id = '2@h#b'`)
	require.NoError(t, err)

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
	s := newTestSystem(t, nil)
	var logs syncBuffer
	s.tel = &app.Telemetry{Providers: s.tel.Providers, Instruments: s.tel.Instruments, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	w, _ := s.startWorker()
	s.waitRequest(s.requestAptTrade(aptTradeBody([]string{"11110"}, "2025-01", "2025-01")), "DONE")

	raw := s.raw("/v1/workers")
	require.Contains(t, raw, w.ID())
	require.Contains(t, raw, "BUILDRISK_KEY_MOLIT")
	for _, secret := range []string{"test-molit-key", "test-dart-key", "test-krx-key", "test-credit-key"} {
		require.NotContains(t, raw, secret)
		require.NotContains(t, logs.String(), secret)
	}
	_, out := s.get("/v1/workers")
	workers := out["workers"].([]any)
	require.Len(t, workers, 1)
	require.Equal(t, true, workers[0].(map[string]any)["alive"])
	require.NoError(t, w.Ready(context.Background()))
}

// Result recording survives a database outage: with the worker's database
// cut for less than the retry window the outcome is recorded once it is
// back, by the retry alone (the reconcile loop is off, and only the retry
// completes the River job in the same transaction); cut for longer, the
// reconcile loop finalizes the request from the execution's recorded
// result, only while it is still RUNNING (and its River job is cancelled).
func TestRegistry_ResultRecordingOutage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		outage         time.Duration
		recordWindow   time.Duration
		reconcile      time.Duration
		wantRiverState string
	}{
		{"ShortOutage_RecordedWhenBack", 700 * time.Millisecond, 20 * time.Second, time.Hour, "completed"},
		{"LongOutage_Reconciled", 2 * time.Second, 500 * time.Millisecond, 200 * time.Millisecond, "cancelled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// A stale window longer than the outage: only the retry or the
			// reconcile loop may finalize, never the reaper.
			s := newTestSystem(t, &testSystemOpts{env: map[string]string{"BUILDRISK_STALE_AFTER": "1m"}})
			proxy := newCutProxy(t, s.dbURL)
			workerPool, err := pgxpool.New(context.Background(), proxy.url)
			require.NoError(t, err)
			t.Cleanup(workerPool.Close)

			cut := make(chan struct{})
			var once sync.Once
			s.startWorkerWith(workerPool, func(wc *worker.Config, rc *batch.Config) {
				wc.ReconcileInterval = tc.reconcile
				rc.RecordRetryWindow = tc.recordWindow
				rc.RecordHook = func() {
					once.Do(func() {
						proxy.cut()
						close(cut)
						time.AfterFunc(tc.outage, proxy.restore)
					})
				}
			})
			id := s.requestAptTrade(aptTradeBody([]string{"11110"}, "2025-01", "2025-02"))
			<-cut
			_, during := s.get("/v1/requests/" + id)
			require.Equal(t, "RUNNING", during["status"], "the request outcome is not recorded while the database is cut")
			require.Equal(t, "COMPLETED", execution(t, during)["status"], "the execution's outcome was recorded before the cut")

			done := s.waitRequest(id, "DONE", "FAILED")
			require.Equal(t, "DONE", done["status"])
			require.Contains(t, done["message"], "completed")
			waitUntil(t, time.Minute, "the River job to end", func() bool {
				return s.count("SELECT count(*) FROM river_job WHERE state = 'running'") == 0
			})
			require.Equal(t, 1, s.count("SELECT count(*) FROM river_job WHERE state = $1", tc.wantRiverState),
				"the River job shows which path finalized the request")
		})
	}
}

// cutProxy forwards TCP to PostgreSQL and can cut every connection.
type cutProxy struct {
	url      string
	target   string
	mu       sync.Mutex
	down     bool
	conns    map[net.Conn]struct{}
	listener net.Listener
}

func newCutProxy(t *testing.T, databaseURL string) *cutProxy {
	t.Helper()
	cfg, err := pgx.ParseConfig(databaseURL)
	require.NoError(t, err)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{target: fmt.Sprintf("%s:%d", cfg.Host, cfg.Port), conns: map[net.Conn]struct{}{}, listener: listener}
	p.url = strings.Replace(databaseURL, fmt.Sprintf("%s:%d", cfg.Host, cfg.Port), listener.Addr().String(), 1)
	t.Cleanup(func() { listener.Close(); p.cut() })
	go p.serve()
	return p
}

func (p *cutProxy) serve() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			client.Close()
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			client.Close()
			continue
		}
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go func() { _, _ = io.Copy(server, client); server.Close() }()
		go func() { _, _ = io.Copy(client, server); client.Close() }()
	}
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *cutProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// countingPool returns a pool on the test database that counts statements.
func (s *testSystem) countingPool(n *atomic.Int32) *pgxpool.Pool {
	s.t.Helper()
	cfg, err := pgxpool.ParseConfig(s.dbURL)
	require.NoError(s.t, err)
	cfg.ConnConfig.Tracer = countingTracer{n}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(s.t, err)
	s.t.Cleanup(pool.Close)
	return pool
}

type countingTracer struct{ n *atomic.Int32 }

func (c countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func mustEnqueuer(t *testing.T, s *testSystem) *requestEnqueuer {
	t.Helper()
	e, err := app.NewEnqueuer(s.pool, nil, s.env, s.tel)
	require.NoError(t, err)
	return e
}

// raw returns the body of a viewer GET as a string.
func (s *testSystem) raw(path string) string {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.api.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+testViewerToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type recorder struct {
	header http.Header
	body   *bytes.Buffer
	status int
}

func newRecorder(body *bytes.Buffer) *recorder {
	return &recorder{header: http.Header{}, body: body, status: 200}
}
func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(p []byte) (int, error) { return r.body.Write(p) }
func (r *recorder) WriteHeader(status int)      { r.status = status }

// heldRun is a River worker of runs that never starts them: it reports each
// River job it was handed and holds it until its context ends (River's
// cancel, or the client's stop), like a worker process that died after the
// fetch.
type heldRun struct {
	river.WorkerDefaults[jobs.RunArgs]
	fetched chan int64
}

func (h *heldRun) Work(ctx context.Context, job *river.Job[jobs.RunArgs]) error {
	h.fetched <- job.ID
	<-ctx.Done()
	return river.JobCancel(ctx.Err())
}

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
	s := newTestSystem(t, nil)
	body := aptTradeBody([]string{"11110"}, "2025-01", "2025-01")
	riverJobOf := func(requestID string) int64 {
		var id int64
		require.NoError(t, s.pool.QueryRow(ctx, "SELECT river_job_id FROM job_request WHERE id = $1", requestID).Scan(&id))
		return id
	}
	finish := func(requestID string) {
		t.Helper()
		_, err := s.pool.Exec(ctx, `UPDATE job_request SET status = 'DONE' WHERE id = $1`, requestID)
		require.NoError(t, err)
	}

	// A worker that fetched the job and died (no heartbeat ever).
	held := &heldRun{fetched: make(chan int64, 4)}
	workers := river.NewWorkers()
	river.AddWorker(workers, river.Worker[jobs.RunArgs](held))
	dead, err := river.NewClient(riverpgxv5.New(s.pool), &river.Config{
		ID: "9@dead-host#b00t", Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}}, Workers: workers,
		FetchCooldown: river.FetchCooldownMin, FetchPollInterval: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, dead.Start(ctx))
	first := s.requestAptTrade(body)
	select {
	case id := <-held.fetched:
		require.Equal(t, riverJobOf(first), id)
	case <-time.After(30 * time.Second):
		t.Fatal("the River client did not fetch the request's job within 30s")
	}
	second := s.requestAptTrade(body) // 202: the cleanup under the lock freed the job
	require.NotEqual(t, first, second)
	_, old := s.get("/v1/requests/" + first)
	require.Equal(t, "FAILED", old["status"])
	require.Contains(t, old["message"], "worker 9@dead-host#b00t stopped heartbeating (last heartbeat never) before it started the run")
	finish(second)
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, dead.StopAndCancel(stopCtx))
	s.eventually("River to end the dead worker's job cancelled", func() bool {
		return s.count("SELECT count(*) FROM river_job WHERE id = $1 AND state = 'cancelled'", riverJobOf(first)) == 1
	})

	// A River job that ended without running.
	third := s.requestAptTrade(body)
	_, err = dead.JobCancel(ctx, riverJobOf(third))
	require.NoError(t, err)
	fourth := s.requestAptTrade(body)
	require.NotEqual(t, third, fourth)
	_, old = s.get("/v1/requests/" + third)
	require.Equal(t, "FAILED", old["status"])
	require.Contains(t, old["message"], "no worker will run it")
	finish(fourth)

	require.Equal(t, float64(1), s.metric("buildrisk_requests_failed_total", map[string]string{"job": "aptTrade", "reason": "orphaned"}),
		"the orphaned request failed is counted")
	require.Equal(t, float64(1), s.metric("buildrisk_worker_stale_heartbeats_total", nil),
		"the dead worker's request is counted as a stale worker's")
}

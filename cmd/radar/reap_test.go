package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

var adminAddrLine = regexp.MustCompile(`worker running.*admin_addr=(\S+)`)

// seedExposure puts n companies of the fake universe in the exposure ledger.
func (s *testSystem) seedExposure(n int) {
	s.t.Helper()
	for i, c := range s.fake.Companies()[:n] {
		_, err := s.pool.Exec(context.Background(), `INSERT INTO exposure (corp_code, outstanding_krw) VALUES ($1, $2)`, c.CorpCode, 1_000_000+i)
		require.NoError(s.t, err)
	}
}

// waitHeldBy waits until request id is RUNNING and returns its worker id.
func (s *testSystem) waitHeldBy(id string) string {
	s.t.Helper()
	out := s.waitRequest(id, "RUNNING")
	return out["workerId"].(string)
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// metricLine returns the value of the first sample of name with all the
// given label pairs in a Prometheus text exposition.
func metricLine(exposition, name string, labels ...string) (float64, bool) {
	for _, line := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(line, l)
		}
		if !match {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		return v, err == nil
	}
	return 0, false
}

// Two worker processes run a job each; kill -9 one: within STALE_AFTER +
// REAP_INTERVAL its request is FAILED naming the worker and its last
// heartbeat, its execution ABANDONED, its River job finalized and the stale
// counter moves; the other worker's run is untouched and completes; a new
// request for the killed job is accepted and resumes from its last commit.
func TestReap_KillNineFreesOnlyTheDeadWorkersJob(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := newTestSystem(t, &testSystemOpts{fake: fakeupstream.Config{Latency: 25 * time.Millisecond}})
	s.seedExposure(600)
	env := s.processEnv(map[string]string{"BUILDRISK_WORKER_CONCURRENCY": "1", "BUILDRISK_FANOUT": "2"})

	victim := startRadar(t, bin, env, "worker")
	victim.waitLine(t, adminAddrLine)
	aptTrade := s.requestAptTrade(aptTradeBody(sixRegions, "2025-01", "2025-12"))
	victimID := s.waitHeldBy(aptTrade)

	survivor := startRadar(t, bin, env, "worker")
	survivorAdmin := survivor.waitLine(t, adminAddrLine)[1]
	status, out := s.post("/v1/jobs/creditEval/requests", `{"params":{}}`)
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	credit := out["requestId"].(string)
	survivorID := s.waitHeldBy(credit)
	require.NotEqual(t, victimID, survivorID)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + survivorAdmin + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
	}

	s.waitChunksDone(aptTrade, 5)
	require.NoError(t, victim.cmd.Process.Kill())
	victim.wait(t, 10*time.Second)

	reaped := s.waitRequest(aptTrade, "FAILED", "DONE")
	// Order, by the database's clock: the request was freed only once the
	// victim's last heartbeat was STALE_AFTER old, never before. How soon
	// after is a latency, measured by BenchmarkReapLatency.
	require.Equal(t, 1, s.count(`SELECT count(*) FROM job_request r JOIN worker w ON w.id = r.worker_id
		WHERE r.id = $1 AND r.finished_at >= w.heartbeat_at + make_interval(secs => $2)`, aptTrade, s.env.StaleAfter.Seconds()),
		"reaped only after the stale window")
	require.Equal(t, "FAILED", reaped["status"])
	require.Contains(t, reaped["message"], victimID)
	require.Contains(t, reaped["message"], "last heartbeat")
	reapedExec := execution(t, reaped)
	require.Equal(t, "ABANDONED", reapedExec["status"])
	// The dead worker's River job is cancelled through River's API: River
	// records the cancel at once and its rescuer finalizes the job (nobody
	// is left to return from it).
	require.Equal(t, 1, s.count("SELECT count(*) FROM river_job j JOIN job_request r ON r.river_job_id = j.id WHERE r.id = $1 AND j.metadata ? 'cancel_attempted_at'", aptTrade))
	_, creditNow := s.get("/v1/requests/" + credit)
	require.Equal(t, "RUNNING", creditNow["status"], "the live worker's run is never touched")

	waitUntil(t, 10*time.Second, "the stale counter to reach 1 on the reaping worker", func() bool {
		v, ok := metricLine(scrape(t, survivorAdmin), "buildrisk_worker_stale_heartbeats_total")
		return ok && v == 1
	})

	creditDone := s.waitRequest(credit, "DONE", "FAILED")
	require.Equal(t, "COMPLETED", execution(t, creditDone)["status"], "%v", creditDone)
	require.Equal(t, survivorID, creditDone["workerId"])

	status, again := s.post("/v1/jobs/aptTrade/requests", aptTradeBody(sixRegions, "2025-01", "2025-12"))
	require.Equal(t, http.StatusAccepted, status, "%v", again)
	require.Equal(t, reapedExec["id"], again["resumesExecutionId"])
	done := s.waitRequest(again["requestId"].(string), "DONE", "FAILED")
	require.Equal(t, "COMPLETED", execution(t, done)["status"], "%v", done)
	var refetched int
	for _, n := range s.callsPerKey("aptTrade") {
		if n > 1 {
			refetched++
		}
	}
	require.LessOrEqual(t, refetched, 1, "only the chunk in flight at the kill is fetched again")
	require.Len(t, s.callsPerKey("aptTrade"), 72)
}

// Same, with no reaper on the survivors: the API's cleanup before enqueue,
// under the job's advisory lock, alone frees the job (202, not 409).
func TestReap_CleanupBeforeEnqueueAlone(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := newTestSystem(t, &testSystemOpts{fake: fakeupstream.Config{Latency: 25 * time.Millisecond}})
	victim := startRadar(t, bin, s.processEnv(nil), "worker")
	victim.waitLine(t, adminAddrLine)
	body := aptTradeBody(sixRegions[:2], "2025-01", "2025-12")
	id := s.requestAptTrade(body)
	victimID := s.waitHeldBy(id)
	require.NoError(t, victim.cmd.Process.Kill())
	victim.wait(t, 10*time.Second)

	s.startWorkerWith(s.pool, func(wc *worker.Config, _ *batch.Config) { wc.DisableReaper = true })
	var status int
	var out map[string]any
	waitUntil(t, 15*time.Second, "the job to be freed of the dead worker's request", func() bool {
		status, out = s.post("/v1/jobs/aptTrade/requests", body)
		if status == http.StatusConflict {
			require.Equal(t, id, out["activeRequestId"], "409 only while the dead worker is within its stale window")
		}
		return status != http.StatusConflict
	})
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	require.NotNil(t, out["resumesExecutionId"])
	_, old := s.get("/v1/requests/" + id)
	require.Equal(t, "FAILED", old["status"])
	require.Contains(t, old["message"], victimID)
	require.Equal(t, "COMPLETED", execution(t, s.waitRequest(out["requestId"].(string), "DONE"))["status"])
	require.Equal(t, float64(1), s.metric("buildrisk_worker_stale_heartbeats_total", nil))
}

// With no live worker at all, `radar api` reaps by itself: a request held
// by a dead worker reads FAILED within STALE_AFTER + REAP_INTERVAL, though
// nobody posts a request that would clean it up.
func TestReap_APIReapsWithNoWorker(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := newTestSystem(t, nil)
	var id int64
	require.NoError(t, s.pool.QueryRow(context.Background(), `WITH w AS (
			INSERT INTO worker (id, hostname, pid, boot, heartbeat_at) VALUES ('9@dead-host#b00t', 'dead-host', 9, 'b00t', now() - interval '1 hour')
		)
		INSERT INTO job_request (job, source, status, worker_id, claimed_at) VALUES ('aptTrade', 'api', 'RUNNING', '9@dead-host#b00t', now())
		RETURNING id`).Scan(&id))

	api := startRadar(t, bin, s.processEnv(map[string]string{"BUILDRISK_HTTP_ADDR": "127.0.0.1:0"}), "api")
	api.waitLine(t, regexp.MustCompile(`api listening`))
	waitUntil(t, time.Minute, "the api to reap the dead worker's request", func() bool {
		return s.count(`SELECT count(*) FROM job_request WHERE id = $1 AND status = 'FAILED'`, id) == 1
	})
	_, out := s.get("/v1/requests/" + fmtInt(int(id)))
	require.Equal(t, "FAILED", out["status"])
	require.Contains(t, out["message"], "9@dead-host#b00t stopped heartbeating")
	require.NoError(t, api.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, exitOK, api.wait(t, 30*time.Second))
}

// A reaper that was itself cut off from the database (a partition of its
// node) may have been cut off with the workers it judges: once it reaches
// the database again, it reaps nobody for one stale window, then reaps the
// dead worker as before. A reaper never cut off reaps at once.
func TestReaper_CutOffWaitsOneStaleWindowAfterReconnecting(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, nil)
	ctx := context.Background()
	_, err := s.pool.Exec(ctx, `INSERT INTO worker (id, hostname, pid, boot, heartbeat_at) VALUES ('1@gone#dead', 'gone', 1, 'dead', now() - interval '1 hour')`)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, `INSERT INTO job_request (job, source, requested_by, estimated_calls, status, worker_id, claimed_at)
		VALUES ('aptTrade', 'api', 'test', 1, 'RUNNING', '1@gone#dead', now())`)
	require.NoError(t, err)

	// Staleness counts from the server's start at the earliest: let the
	// test's cluster be up for a stale window first.
	waitUntil(t, time.Minute, "the database to be up for a stale window", func() bool {
		return s.count(`SELECT (now() - pg_postmaster_start_time() > make_interval(secs => $1))::int`, s.env.StaleAfter.Seconds()) == 1
	})
	proxy := newCutProxy(t, s.dbURL)
	pool, err := pgxpool.New(ctx, proxy.url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	reaper := worker.NewReaper(pool, worker.ReaperConfig{StaleAfter: s.env.StaleAfter, Instruments: s.tel.Instruments, Logger: s.tel.Logger})

	proxy.cut()
	_, err = reaper.Reap(ctx, "")
	require.Error(t, err, "the reaper is cut off")
	proxy.restore()
	n, err := reaper.Reap(ctx, "")
	require.NoError(t, err)
	require.Zero(t, n, "just reconnected: the reaper waits one stale window before judging anyone")
	require.Equal(t, "RUNNING", s.requestStatusByWorker("1@gone#dead"))

	waitUntil(t, time.Minute, "the reaper to reap the dead worker once the window has passed", func() bool {
		n, err := reaper.Reap(ctx, "")
		require.NoError(t, err)
		return n == 1
	})
	require.Equal(t, "FAILED", s.requestStatusByWorker("1@gone#dead"))
}

func (s *testSystem) requestStatusByWorker(workerID string) string {
	s.t.Helper()
	var status string
	require.NoError(s.t, s.pool.QueryRow(context.Background(), `SELECT status FROM job_request WHERE worker_id = $1`, workerID).Scan(&status))
	return status
}

// A worker frozen (SIGSTOP of a real `radar worker`) while one of its
// connections holds an open transaction with its execution's row locked —
// a network partition that keeps the socket open looks the same to the
// server — has its job freed within STALE_AFTER + 8 s, by either of two
// mechanisms, each alone:
//   - ServerLimits: the connection carries the service's session limits
//     (idle_in_transaction_session_timeout = FENCE_AFTER), so the server
//     ends the transaction itself; its application_name is not the
//     worker's, so the reaper cannot end it.
//   - ReaperEndsBackend: the connection has no limits but carries the
//     worker's id as application_name; the reaper ends it
//     (pg_terminate_backend) and never waits on its lock meanwhile.
//
// Before, every reap pass failed on the lock (lock timeout) and the job
// stayed blocked for as long as the transaction lived (about 2 h 11 min
// with the server's default keepalives).
func TestReap_FrozenWorkerInTransaction(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	for name, holderLimits := range map[string]func(s *testSystem, workerID string) app.SessionLimits{
		"ServerLimits":      func(s *testSystem, _ string) app.SessionLimits { return s.env.SessionLimits("partition-holder") },
		"ReaperEndsBackend": func(_ *testSystem, workerID string) app.SessionLimits { return app.SessionLimits{AppName: workerID} },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newTestSystem(t, nil)
			// The reaper: `radar api`, as in the report (no other worker).
			api := startRadar(t, bin, s.processEnv(map[string]string{"BUILDRISK_HTTP_ADDR": "127.0.0.1:0"}), "api")
			api.waitLine(t, regexp.MustCompile(`api listening`))
			victim := startRadar(t, bin, s.processEnv(nil), "worker")
			victim.waitLine(t, adminAddrLine)
			s.gate.arm(2)
			t.Cleanup(s.gate.open)
			id := s.requestAptTrade(aptTradeBody([]string{"11110"}, "2025-01", "2025-06"))
			within(t, time.Minute, s.gate.blocked, "the third provider call")
			workerID := s.waitHeldBy(id)
			out := s.waitRequest(id, "RUNNING")
			execID, err := strconv.ParseInt(execution(t, out)["id"].(string), 10, 64)
			require.NoError(t, err)

			// The worker freezes; one of its connections sits in a
			// transaction holding the execution's row.
			require.NoError(t, victim.cmd.Process.Signal(syscall.SIGSTOP))
			t.Cleanup(func() { _ = victim.cmd.Process.Signal(syscall.SIGCONT) })
			ctx := context.Background()
			holderPool, err := app.OpenPool(ctx, s.serviceURL, 1, 0, false, holderLimits(s, workerID))
			require.NoError(t, err)
			holder, err := holderPool.Begin(ctx)
			require.NoError(t, err)
			t.Cleanup(func() {
				rollbackCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				_ = holder.Rollback(rollbackCtx) // releases the connection, so Close does not wait for it
				holderPool.Close()
			})
			_, err = holder.Exec(ctx, "SELECT id FROM job_execution WHERE id = $1 FOR UPDATE", execID)
			require.NoError(t, err)

			bound := s.env.StaleAfter + 8*time.Second
			deadline := time.Now().Add(bound + 10*time.Second) // the poll's own deadline, beyond the bound
			for s.count(`SELECT count(*) FROM job_request WHERE id = $1 AND status = 'FAILED'`, id) == 0 {
				require.True(t, time.Now().Before(deadline), "request %s still not freed", id)
				time.Sleep(50 * time.Millisecond)
			}
			// By the database's clock: freed after the stale window, within
			// STALE_AFTER + 8 s of the frozen worker's last heartbeat.
			var freedAfter float64
			require.NoError(t, s.pool.QueryRow(ctx, `SELECT extract(epoch FROM r.finished_at - w.heartbeat_at)::float8
				FROM job_request r JOIN worker w ON w.id = r.worker_id WHERE r.id = $1`, id).Scan(&freedAfter))
			t.Logf("%s: freed %.2f s after the last heartbeat (stale window %s)", name, freedAfter, s.env.StaleAfter)
			require.GreaterOrEqual(t, freedAfter, s.env.StaleAfter.Seconds())
			require.Less(t, freedAfter, bound.Seconds())
			require.Equal(t, 1, s.count(`SELECT count(*) FROM job_execution WHERE id = $1 AND status = 'ABANDONED'`, execID))
			// The holder's transaction is gone: the server ended it.
			_, err = holder.Exec(ctx, "SELECT 1")
			require.Error(t, err)

			// The job is free: a new request is accepted and resumes.
			s.gate.open()
			status, again := s.post("/v1/jobs/aptTrade/requests", aptTradeBody([]string{"11110"}, "2025-01", "2025-06"))
			require.Equal(t, http.StatusAccepted, status, "%v", again)
		})
	}
}

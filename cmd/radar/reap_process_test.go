package main

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/dbpool"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// Two worker processes run a job each; kill -9 one: within STALE_AFTER +
// REAP_INTERVAL its request is FAILED naming the worker and its last
// heartbeat, its execution ABANDONED, its River job finalized and the stale
// counter moves; the other worker's run is untouched and completes; a new
// request for the killed job is accepted and resumes from its last commit.
func TestReap_KillNineFreesOnlyTheDeadWorkersJob(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := apptest.New(t, &apptest.Opts{Fake: fakeupstream.Config{Latency: 25 * time.Millisecond}})
	s.SeedExposure(600)
	env := s.ProcessEnv(map[string]string{"BUILDRISK_WORKER_CONCURRENCY": "1", "BUILDRISK_FANOUT": "2"})

	victim := startRadar(t, bin, env, "worker")
	victim.waitLine(t, apptest.AdminAddrLine)
	aptTrade := s.RequestAptTrade(apptest.AptTradeBody(apptest.SixRegions, "2025-01", "2025-12"))
	victimID := s.WaitHeldBy(aptTrade)

	survivor := startRadar(t, bin, env, "worker")
	survivorAdmin := survivor.waitLine(t, apptest.AdminAddrLine)[1]
	status, out := s.Post("/v1/jobs/creditEval/requests", `{"params":{}}`)
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	credit := out["requestId"].(string)
	survivorID := s.WaitHeldBy(credit)
	require.NotEqual(t, victimID, survivorID)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + survivorAdmin + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
	}

	s.WaitChunksDone(aptTrade, 5)
	require.NoError(t, victim.cmd.Process.Kill())
	victim.Wait(t, 10*time.Second)

	reaped := s.WaitRequest(aptTrade, "FAILED", "DONE")
	// Order, by the database's clock: the request was freed only once the
	// victim's last heartbeat was STALE_AFTER old, never before. How soon
	// after is a latency, measured by BenchmarkReapLatency.
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM job_request r JOIN worker w ON w.id = r.worker_id
		WHERE r.id = $1 AND r.finished_at >= w.heartbeat_at + make_interval(secs => $2)`, aptTrade, s.Env.StaleAfter.Seconds()),
		"reaped only after the stale window")
	require.Equal(t, "FAILED", reaped["status"])
	require.Contains(t, reaped["message"], victimID)
	require.Contains(t, reaped["message"], "last heartbeat")
	reapedExec := apptest.Execution(t, reaped)
	require.Equal(t, "ABANDONED", reapedExec["status"])
	// The dead worker's River job ended at its claim: nothing of River's
	// stays running under the reaped request, and River's rescuer is on no
	// path.
	require.Equal(t, 1, s.Count("SELECT count(*) FROM river_job j JOIN job_request r ON r.river_job_id = j.id WHERE r.id = $1 AND j.state = 'completed'", aptTrade))
	s.RequireRequestsAgreeWithRiver()
	_, creditNow := s.Get("/v1/requests/" + credit)
	require.Equal(t, "RUNNING", creditNow["status"], "the live worker's run is never touched")

	apptest.WaitUntil(t, 10*time.Second, "the stale counter to reach 1 on the reaping worker", func() bool {
		v, ok := apptest.MetricLine(apptest.Scrape(t, survivorAdmin), "buildrisk_worker_stale_heartbeats_total")
		return ok && v == 1
	})

	creditDone := s.WaitRequest(credit, "DONE", "FAILED")
	require.Equal(t, "COMPLETED", apptest.Execution(t, creditDone)["status"], "%v", creditDone)
	require.Equal(t, survivorID, creditDone["workerId"])

	status, again := s.Post("/v1/jobs/aptTrade/requests", apptest.AptTradeBody(apptest.SixRegions, "2025-01", "2025-12"))
	require.Equal(t, http.StatusAccepted, status, "%v", again)
	require.Equal(t, reapedExec["id"], again["resumesExecutionId"])
	done := s.WaitRequest(again["requestId"].(string), "DONE", "FAILED")
	require.Equal(t, "COMPLETED", apptest.Execution(t, done)["status"], "%v", done)
	var refetched int
	for _, n := range s.CallsPerKey("aptTrade") {
		if n > 1 {
			refetched++
		}
	}
	require.LessOrEqual(t, refetched, 1, "only the chunk in flight at the kill is fetched again")
	require.Len(t, s.CallsPerKey("aptTrade"), 72)
	s.RequireRequestsAgreeWithRiver()
}

// Same, with no reaper on the survivors: the API's cleanup before enqueue,
// under the job's advisory lock, alone frees the job (202, not 409).
func TestReap_CleanupBeforeEnqueueAlone(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := apptest.New(t, &apptest.Opts{Fake: fakeupstream.Config{Latency: 25 * time.Millisecond}})
	victim := startRadar(t, bin, s.ProcessEnv(nil), "worker")
	victim.waitLine(t, apptest.AdminAddrLine)
	body := apptest.AptTradeBody(apptest.SixRegions[:2], "2025-01", "2025-12")
	id := s.RequestAptTrade(body)
	victimID := s.WaitHeldBy(id)
	require.NoError(t, victim.cmd.Process.Kill())
	victim.Wait(t, 10*time.Second)

	s.StartWorkerWith(s.Pool, func(wc *worker.Config, _ *batch.Config) { wc.DisableReaper = true })
	var status int
	var out map[string]any
	apptest.WaitUntil(t, 15*time.Second, "the job to be freed of the dead worker's request", func() bool {
		status, out = s.Post("/v1/jobs/aptTrade/requests", body)
		if status == http.StatusConflict {
			require.Equal(t, id, out["activeRequestId"], "409 only while the dead worker is within its stale window")
		}
		return status != http.StatusConflict
	})
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	require.NotNil(t, out["resumesExecutionId"])
	_, old := s.Get("/v1/requests/" + id)
	require.Equal(t, "FAILED", old["status"])
	require.Contains(t, old["message"], victimID)
	require.Equal(t, "COMPLETED", apptest.Execution(t, s.WaitRequest(out["requestId"].(string), "DONE"))["status"])
	require.Equal(t, float64(1), s.Metric("buildrisk_worker_stale_heartbeats_total", nil))
}

// With no live worker at all, `radar api` reaps by itself: a request held
// by a dead worker reads FAILED within STALE_AFTER + REAP_INTERVAL, though
// nobody posts a request that would clean it up.
func TestReap_APIReapsWithNoWorker(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := apptest.New(t, nil)
	dead := testfactory.Worker(context.Background(), t, s.Pool, &testfactory.WorkerOpts{ID: "9@dead-host#b00t", HeartbeatAge: time.Hour})
	id := testfactory.Request(context.Background(), t, s.Pool, &testfactory.RequestOpts{Job: "aptTrade", Status: radartype.RequestRunning, WorkerID: dead.ID}).ID

	api := startRadar(t, bin, s.ProcessEnv(map[string]string{"BUILDRISK_HTTP_ADDR": "127.0.0.1:0"}), "api")
	api.waitLine(t, regexp.MustCompile(`api listening`))
	apptest.WaitUntil(t, time.Minute, "the api to reap the dead worker's request", func() bool {
		return s.Count(`SELECT count(*) FROM job_request WHERE id = $1 AND status = 'FAILED'`, id) == 1
	})
	_, out := s.Get("/v1/requests/" + apptest.FmtInt(int(id)))
	require.Equal(t, "FAILED", out["status"])
	require.Contains(t, out["message"], "9@dead-host#b00t stopped heartbeating")
	require.NoError(t, api.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, exitOK, api.Wait(t, 30*time.Second))
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
	for name, holderLimits := range map[string]func(s *apptest.System, workerID string) config.SessionLimits{
		"ServerLimits": func(s *apptest.System, _ string) config.SessionLimits { return s.Env.SessionLimits("partition-holder") },
		"ReaperEndsBackend": func(_ *apptest.System, workerID string) config.SessionLimits {
			return config.SessionLimits{AppName: workerID}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := apptest.New(t, nil)
			// The reaper: `radar api`, as in the report (no other worker).
			api := startRadar(t, bin, s.ProcessEnv(map[string]string{"BUILDRISK_HTTP_ADDR": "127.0.0.1:0"}), "api")
			api.waitLine(t, regexp.MustCompile(`api listening`))
			victim := startRadar(t, bin, s.ProcessEnv(nil), "worker")
			victim.waitLine(t, apptest.AdminAddrLine)
			s.Gate.Arm(2)
			t.Cleanup(s.Gate.Open)
			id := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-06"))
			apptest.Within(t, time.Minute, s.Gate.Blocked, "the third provider call")
			workerID := s.WaitHeldBy(id)
			out := s.WaitRequest(id, "RUNNING")
			execID, err := strconv.ParseInt(apptest.Execution(t, out)["id"].(string), 10, 64)
			require.NoError(t, err)

			// The worker freezes; one of its connections sits in a
			// transaction holding the execution's row.
			require.NoError(t, victim.cmd.Process.Signal(syscall.SIGSTOP))
			t.Cleanup(func() { _ = victim.cmd.Process.Signal(syscall.SIGCONT) })
			ctx := context.Background()
			holderPool, err := dbpool.Open(ctx, s.ServiceURL, 1, 0, false, holderLimits(s, workerID))
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

			bound := s.Env.StaleAfter + 8*time.Second
			// The poll's own deadline lies beyond the bound, which is checked
			// below by the database's clock.
			apptest.WaitUntil(t, bound+10*time.Second, "request "+id+" freed", func() bool {
				return s.Count(`SELECT count(*) FROM job_request WHERE id = $1 AND status = 'FAILED'`, id) > 0
			})
			// By the database's clock: freed after the stale window, within
			// STALE_AFTER + 8 s of the frozen worker's last heartbeat.
			var freedAfter float64
			require.NoError(t, s.Pool.QueryRow(ctx, `SELECT extract(epoch FROM r.finished_at - w.heartbeat_at)::float8
				FROM job_request r JOIN worker w ON w.id = r.worker_id WHERE r.id = $1`, id).Scan(&freedAfter))
			t.Logf("%s: freed %.2f s after the last heartbeat (stale window %s)", name, freedAfter, s.Env.StaleAfter)
			require.GreaterOrEqual(t, freedAfter, s.Env.StaleAfter.Seconds())
			require.Less(t, freedAfter, bound.Seconds())
			require.Equal(t, 1, s.Count(`SELECT count(*) FROM job_execution WHERE id = $1 AND status = 'ABANDONED'`, execID))
			// The holder's transaction is gone: the server ended it.
			_, err = holder.Exec(ctx, "SELECT 1")
			require.Error(t, err)

			// The job is free: a new request is accepted and resumes.
			s.Gate.Open()
			status, again := s.Post("/v1/jobs/aptTrade/requests", apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-06"))
			require.Equal(t, http.StatusAccepted, status, "%v", again)
		})
	}
}

package e2e_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/dbpool"
	"github.com/buildrisk/radar/internal/jobset"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/sql/pgtest"
)

// fenceDeadline bounds the wait for a fenced worker to give up its call in
// flight: well past the 1 s fencing threshold of the test environment, and
// well before the provider call's own 30 s timeout could end it instead.
const fenceDeadline = 20 * time.Second

// retryingLine is the line a run logs at the first transient database
// error it retries (once an outage).
const retryingLine = `"msg":"database unavailable; retrying inside the fencing window"`

// A one-second PostgreSQL restart in the middle of a run (a fast shutdown,
// then a start): the chunk commit that meets it, and the heartbeats, are
// retried inside the fencing window, and the run ends COMPLETED with every
// chunk fetched once.
func TestOutage_RestartMidRunCompletes(t *testing.T) {
	t.Parallel()
	cluster, url := apptest.PrivateCluster(t)
	// A fencing window (15 s) far longer than a restart, even on a loaded
	// machine: the restart must cost a pause, never the run.
	logs := &apptest.SyncBuffer{}
	s := apptest.New(t, &apptest.Opts{DBURL: url, Logs: logs, Env: map[string]string{
		"BUILDRISK_HEARTBEAT_INTERVAL": "500ms", "BUILDRISK_STALE_AFTER": "30s",
	}})
	s.StartWorker()
	s.Gate.Arm(3) // chunks 1-3 commit; chunk 4's call is held
	id := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-12"))
	apptest.Within(t, time.Minute, s.Gate.Blocked, "the fourth provider call")

	halted := time.Now()
	require.NoError(t, cluster.Halt())
	s.Gate.Open() // chunk 4's call returns; its commit meets the restart
	// The run logs the first transient error it retries: the commit met
	// the outage and is being retried, not failed.
	apptest.WaitUntil(t, time.Minute, "the commit to meet the outage", func() bool {
		return strings.Contains(logs.String(), retryingLine)
	})
	time.Sleep(time.Until(halted.Add(time.Second))) // the restart lasts a second, heartbeats fail meanwhile
	require.NoError(t, cluster.Resume(context.Background()))
	t.Logf("postgres was down for %s", time.Since(halted).Round(time.Millisecond))

	done := s.WaitRequestAfterOutage(id, "DONE", "FAILED")
	exec := apptest.Execution(t, done)
	require.Equal(t, "COMPLETED", exec["status"], "%v", done)
	require.Equal(t, float64(12), exec["chunksDone"])
	require.Equal(t, float64(12), exec["externalCalls"])
	apptest.RequireEachKeyOnce(t, s, 12)
	require.Equal(t, 1, s.Count("SELECT count(*) FROM job_execution"))
}

// PostgreSQL down for longer than STALE_AFTER while a provider call is in
// flight: the worker fences itself (not ready) and cancels the call before
// anyone can reap it, commits nothing; when the database is back, the
// execution ends STOPPED (recorded by the worker, naming the outage) or
// ABANDONED (reaped, and the worker writes nothing); a new request resumes
// it (the execution ends STOPPED, cause database, when its worker records
// it). No two executions overlap and no provider call is repeated.
func TestOutage_LongerThanStaleDuringSlowCall(t *testing.T) {
	t.Parallel()
	cluster, url := apptest.PrivateCluster(t)
	s := apptest.New(t, &apptest.Opts{DBURL: url})
	w, _ := s.StartWorker()
	s.Gate.Arm(2) // chunks 1-2 commit; chunk 3's call is held (a slow provider)
	id := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-06"))
	apptest.Within(t, time.Minute, s.Gate.Blocked, "the third provider call")

	var lastBeat time.Time
	require.NoError(t, s.Pool.QueryRow(context.Background(), "SELECT heartbeat_at FROM worker WHERE id = $1", w.ID()).Scan(&lastBeat))
	require.NoError(t, cluster.Halt())
	apptest.Within(t, fenceDeadline, s.Gate.Abandoned, "the fenced worker to cancel the call in flight")
	require.ErrorContains(t, w.Ready(context.Background()), "fenced")
	// The outage lasts past STALE_AFTER (2 s): the worker's heartbeat is
	// stale when the database comes back. A beat may have landed between
	// the read and the halt, hence one interval more.
	apptest.WaitUntil(t, time.Minute, "the worker's last heartbeat to be stale", func() bool {
		return time.Since(lastBeat) > s.Env.StaleAfter+s.Env.HeartbeatInterval
	})
	s.Gate.Open()
	require.NoError(t, cluster.Resume(context.Background()))

	first := s.WaitRequestAfterOutage(id, "FAILED", "DONE")
	firstExec := apptest.Execution(t, first)
	t.Logf("first execution: %s: %s", firstExec["status"], firstExec["exitMessage"])
	require.Contains(t, []any{"STOPPED", "ABANDONED"}, firstExec["status"])
	if firstExec["status"] == "STOPPED" {
		require.Contains(t, firstExec["exitMessage"], "database outage")
	}
	require.Equal(t, float64(2), firstExec["chunksDone"])
	apptest.WaitUntil(t, time.Minute, "the worker to be ready again", func() bool { return w.Ready(context.Background()) == nil })

	again := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-06"))
	done := s.WaitRequest(again, "DONE", "FAILED")
	require.Equal(t, "COMPLETED", apptest.Execution(t, done)["status"], "%v", done)
	require.Equal(t, firstExec["id"], done["resumesExecutionId"])
	s.NoOverlap(t)
	apptest.RequireEachKeyOnce(t, s, 6)
}

// The split brain of a false reap, made deterministic: worker A is cut off
// from the database (the database itself stays up) while a provider call is
// in flight. A fences itself and cancels the call; once A is stale by the
// database's clock, a new request reaps A's request and worker B resumes
// the execution to COMPLETED. When A's connection comes back, A
// re-registers, and its run finds its execution no longer its own: it
// writes nothing and counts buildrisk_ownership_lost_total.
func TestOutage_PartitionedWorkerIsReapedAndWritesNothing(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	proxy := apptest.NewCutProxy(t, s.DBURL)
	poolA, err := pgxpool.New(context.Background(), proxy.URL)
	require.NoError(t, err)
	t.Cleanup(poolA.Close)
	a, _ := s.StartWorkerWith(poolA, nil)

	s.Gate.Arm(2)
	body := apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-06")
	id := s.RequestAptTrade(body)
	apptest.Within(t, time.Minute, s.Gate.Blocked, "the third provider call")
	require.Equal(t, a.ID(), s.WaitHeldBy(id))

	proxy.Cut()
	apptest.Within(t, fenceDeadline, s.Gate.Abandoned, "the fenced worker to cancel the call in flight")
	require.ErrorContains(t, a.Ready(context.Background()), "fenced")
	apptest.WaitUntil(t, time.Minute, "worker A to be stale by the database's clock", func() bool {
		return s.Count(`SELECT count(*) FROM worker WHERE id = $1 AND heartbeat_at < now() - make_interval(secs => $2)`, a.ID(), s.Env.StaleAfter.Seconds()) == 1
	})
	s.Gate.Open()

	// The API's cleanup before enqueue reaps A (stale); then worker B starts
	// (in this process B shares A's pid@hostname slot: started first, it
	// would free A's request as a previous boot's instead).
	status, again := s.Post("/v1/jobs/aptTrade/requests", body)
	require.Equal(t, 202, status, "%v", again)
	s.StartWorker()
	_, first := s.Get("/v1/requests/" + id)
	require.Equal(t, "FAILED", first["status"])
	require.Contains(t, first["message"], "stopped heartbeating")
	firstExec := apptest.Execution(t, first)
	require.Equal(t, "ABANDONED", firstExec["status"])
	require.Equal(t, firstExec["id"], again["resumesExecutionId"])
	done := s.WaitRequest(again["requestId"].(string), "DONE", "FAILED")
	require.Equal(t, "COMPLETED", apptest.Execution(t, done)["status"], "%v", done)

	proxy.Restore()
	apptest.WaitUntil(t, time.Minute, "worker A to re-register and be ready", func() bool { return a.Ready(context.Background()) == nil })
	apptest.WaitUntil(t, time.Minute, "worker A's run to find its ownership lost", func() bool {
		return s.Metric("buildrisk_ownership_lost_total", map[string]string{"job": "aptTrade"}) == 1
	})
	_, first = s.Get("/v1/requests/" + id)
	firstExec = apptest.Execution(t, first)
	require.Equal(t, "ABANDONED", firstExec["status"], "the reaper's record stands")
	require.Equal(t, float64(2), firstExec["chunksDone"])
	s.NoOverlap(t)
	apptest.RequireEachKeyOnce(t, s, 6)
}

// The worker's and the CLI's connections carry BUILDRISK_DB_STATEMENT_TIMEOUT
// as their statement_timeout (so a lock wait cannot hold a heartbeat or a
// commit past the fencing window); a pool opened without one keeps the
// server's default.
func TestOpenPool_StatementTimeout(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	for timeout, want := range map[time.Duration]string{1500 * time.Millisecond: "1500ms", 0: "0"} {
		pool, err := dbpool.Open(ctx, url, 2, timeout, false, config.SessionLimits{})
		require.NoError(t, err)
		var got string
		require.NoError(t, pool.QueryRow(ctx, "SHOW statement_timeout").Scan(&got))
		pool.Close()
		require.Equal(t, want, got)
	}
	pool, err := dbpool.Open(ctx, url, 2, 200*time.Millisecond, false, config.SessionLimits{})
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, "SELECT pg_sleep(5)")
	require.ErrorContains(t, err, "57014", "a statement past the timeout is cancelled by the server")
}

// An outage of the database longer than STALE_AFTER (2 s here), of 4.5 s
// or 10 s, with two live workers that are both cut off: each worker fences
// itself and cancels its call in flight; when the database is back, nobody
// is reaped (staleness counts only time the database was up, and a reaper
// that was itself cut off waits one stale window), the run ends STOPPED
// with cause database and resumes by itself to COMPLETED: one outcome
// whatever the outage's length, no request by anyone, every call once.
func TestOutage_LongerThanStaleEndsResumedNobodyReaped(t *testing.T) {
	t.Parallel()
	for name, outage := range map[string]time.Duration{"4.5s": 4500 * time.Millisecond, "10s": 10 * time.Second} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cluster, url := apptest.PrivateCluster(t)
			s := apptest.New(t, &apptest.Opts{DBURL: url, Env: map[string]string{
				"BUILDRISK_AUTO_RESUME": request.AutoResumeCausesDefault,
			}})
			// The workers' heartbeats go through a proxy the test keeps cut
			// for a moment after the database is back: the moment before a
			// live worker re-registers, when a reaper used to take it for dead.
			heartbeats := apptest.NewCutProxy(t, s.DBURL)
			hbPool, err := dbpool.OpenHeartbeat(context.Background(), heartbeats.URL, 4, s.Env.DBTimeout, false, config.SessionLimits{})
			require.NoError(t, err)
			t.Cleanup(hbPool.Close)
			a, _ := s.StartWorkerWith(s.Pool, func(wc *worker.Config, _ *batch.Config) { wc.HeartbeatPool = hbPool })
			b, _ := s.StartWorkerWith(s.Pool, func(wc *worker.Config, _ *batch.Config) { wc.HeartbeatPool = hbPool })
			s.Gate.Arm(2) // chunks 1-2 commit; chunk 3's call is held
			id := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-06"))
			apptest.Within(t, time.Minute, s.Gate.Blocked, "the third provider call")

			halted := time.Now()
			require.NoError(t, cluster.Halt())
			apptest.Within(t, fenceDeadline, s.Gate.Abandoned, "the fenced worker to cancel the call in flight")
			time.Sleep(time.Until(halted.Add(outage)))
			s.Gate.Open()
			heartbeats.Cut()
			require.NoError(t, cluster.Resume(context.Background()))
			t.Logf("postgres was down for %s", time.Since(halted).Round(time.Millisecond))
			// A reaper that was not cut off itself (a fresh api's), passing
			// before the workers re-register: their last heartbeats are older
			// than STALE_AFTER, but the database has been up for less.
			fresh, err := pgxpool.New(context.Background(), s.DBURL)
			require.NoError(t, err)
			defer fresh.Close()
			reaper, err := request.NewOwner(fresh, a.River(), request.Config{
				Catalog: jobset.Catalog(), StaleAfter: s.Env.StaleAfter, Instruments: s.Tel.Instruments, Logger: s.Tel.Logger,
			})
			require.NoError(t, err)
			reaped, err := reaper.Reap(context.Background(), "")
			require.NoError(t, err)
			require.Zero(t, reaped, "a live worker that could not beat through the outage is not stale yet")
			heartbeats.Restore()

			first := s.WaitRequestAfterOutage(id, "DONE", "FAILED")
			firstExec := apptest.Execution(t, first)
			t.Logf("first execution: %s: %s", firstExec["status"], firstExec["exitMessage"])
			require.Equal(t, "DONE", first["status"], "%v", first)
			require.Equal(t, "STOPPED", firstExec["status"], "the outage stops the run, it does not fail it")
			require.Contains(t, firstExec["exitMessage"], "database outage")
			require.Equal(t, "database", s.StopCause(firstExec["id"].(string)))
			resumeID := s.ResumeOf(firstExec["id"].(string))
			require.NotEmpty(t, resumeID, "the run resumes by itself")
			done := s.WaitRequest(resumeID, "DONE", "FAILED")
			require.Equal(t, "COMPLETED", apptest.Execution(t, done)["status"], "%v", done)

			require.Zero(t, s.Count(`SELECT count(*) FROM job_execution WHERE status = 'ABANDONED'`), "no live worker reaped")
			require.Zero(t, s.Count(`SELECT count(*) FROM job_request WHERE message LIKE '%stopped heartbeating%'`), "no live worker reaped")
			require.Equal(t, 2, s.Count(`SELECT count(*) FROM job_request`), "no request by anyone but the resume")
			for _, w := range []*app.Worker{a, b} {
				apptest.WaitUntil(t, time.Minute, "the worker to be ready again", func() bool { return w.Ready(context.Background()) == nil })
			}
			s.NoOverlap(t)
			apptest.RequireEachKeyOnce(t, s, 6)
		})
	}
}

// Every connection of a worker carries the server-side limits derived from
// the fencing window (idle in a transaction no longer than FENCE_AFTER,
// keepalives that notice a dead peer within about FENCE_AFTER) and the
// worker's id as application_name, unless DATABASE_URL names one (an
// operator's or a harness's own), which wins. On PostgreSQL 17 and later
// transaction_timeout is set too; an older server is not asked for it.
func TestOpenPool_SessionLimits(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	env, err := config.LoadEnv(func(k string) string {
		return map[string]string{"BUILDRISK_STALE_AFTER": "12s", "BUILDRISK_HEARTBEAT_INTERVAL": "2s"}[k]
	})
	require.NoError(t, err)
	require.Equal(t, 6*time.Second, env.FenceAfter)
	pool, err := dbpool.Open(ctx, url, 2, env.DBTimeout, false, env.SessionLimits("7@host#b00t"))
	require.NoError(t, err)
	defer pool.Close()
	show := func(p *pgxpool.Pool, name string) string {
		var v string
		require.NoError(t, p.QueryRow(ctx, "SELECT current_setting($1, true)", name).Scan(&v))
		return v
	}
	require.Equal(t, "7@host#b00t", show(pool, "application_name"))
	require.Equal(t, "6s", show(pool, "idle_in_transaction_session_timeout"))
	require.Equal(t, "6000", show(pool, "tcp_user_timeout"), "milliseconds")
	require.Equal(t, "2", show(pool, "tcp_keepalives_idle"), "a third of FENCE_AFTER, in seconds")
	var major int
	require.NoError(t, pool.QueryRow(ctx, "SELECT current_setting('server_version_num')::int / 10000").Scan(&major))
	if major >= 17 {
		require.Equal(t, "11s", show(pool, "transaction_timeout"), "FENCE_AFTER + HEARTBEAT_INTERVAL + DB timeout")
	}
	// The idle transaction is ended by the server.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }() // before pool.Close, which waits for the connection
	_, err = tx.Exec(ctx, "SET LOCAL idle_in_transaction_session_timeout = '100ms'")
	require.NoError(t, err)
	// Each probe leaves the transaction idle for three times the limit
	// first: a probe sooner than the limit would keep it alive for ever.
	apptest.WaitUntil(t, 30*time.Second, "the server to end the idle transaction", func() bool {
		time.Sleep(300 * time.Millisecond)
		_, err := tx.Exec(ctx, "SELECT 1")
		return err != nil
	})

	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = "operator-choice" // as DATABASE_URL or PGAPPNAME give it
	cfg.MaxConns = 1
	env.SessionLimits("7@host#b00t").Apply(cfg, false)
	named, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer named.Close()
	require.Equal(t, "operator-choice", show(named, "application_name"))
	require.Equal(t, "6s", show(named, "idle_in_transaction_session_timeout"))
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/sql/pgtest"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// buildRadar builds the radar binary into the test's temp dir.
func buildRadar(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "radar")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// radarProcess is a radar child process with its output captured.
type radarProcess struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	output bytes.Buffer
	lines  chan string
	done   chan struct{}
}

func startRadar(t *testing.T, bin string, env map[string]string, args ...string) *radarProcess {
	t.Helper()
	return startRadarIn(t, "", bin, env, args...)
}

// startRadarIn starts radar as startRadar does, in the working directory
// dir ("" is the test's), where dev writes its .radar files.
func startRadarIn(t *testing.T, dir, bin string, env map[string]string, args ...string) *radarProcess {
	t.Helper()
	p := &radarProcess{cmd: exec.Command(bin, args...), lines: make(chan string, 1000), done: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Env = os.Environ()
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	stdout, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	p.cmd.Stderr = p.cmd.Stdout
	require.NoError(t, p.cmd.Start())
	go func() {
		defer close(p.done)
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			p.mu.Lock()
			p.output.WriteString(scanner.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- scanner.Text():
			default:
			}
		}
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("radar %v output:\n%s", args, p.Output())
		}
	})
	return p
}

func (p *radarProcess) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.output.String()
}

// waitLine waits for an output line matching re.
func (p *radarProcess) waitLine(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case line := <-p.lines:
			if m := re.FindStringSubmatch(line); m != nil {
				return m
			}
		case <-p.done:
			t.Fatalf("process ended before printing %s:\n%s", re, p.Output())
		case <-timeout:
			t.Fatalf("timed out waiting for %s:\n%s", re, p.Output())
		}
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *radarProcess) Wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	exited := make(chan error, 1)
	go func() { <-p.done; exited <- p.cmd.Wait() }()
	select {
	case <-exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("process did not exit within %s:\n%s", timeout, p.Output())
		return -1
	}
}

// AptTradeJobIT: 6 regions × 12 months with latency; a worker process gets
// SIGTERM mid-run, exits 0 within the drain timeout with the execution
// STOPPED and the request DONE; a new request resumes and completes; the
// fake upstream saw exactly 72 calls, no combination twice.
func TestProcess_WorkerDrainOnSIGTERM(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := apptest.New(t, &apptest.Opts{Fake: fakeupstream.Config{Latency: 20 * time.Millisecond}})
	drainTimeout := 20 * time.Second
	worker := startRadar(t, bin, s.ProcessEnv(map[string]string{"BUILDRISK_DRAIN_TIMEOUT": drainTimeout.String()}), "worker")
	worker.waitLine(t, regexp.MustCompile(`worker running`))

	body := apptest.AptTradeBody(apptest.SixRegions, "2025-01", "2025-12")
	id := s.RequestAptTrade(body)
	s.WaitChunksDone(id, 10)
	signalled := time.Now()
	require.NoError(t, worker.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, worker.Wait(t, drainTimeout+10*time.Second), "the worker exits 0 after draining")
	require.Less(t, time.Since(signalled), drainTimeout)
	require.Contains(t, worker.Output(), "worker stopped")

	out := s.WaitRequest(id, "DONE", "FAILED")
	require.Equal(t, "DONE", out["status"])
	exec := apptest.Execution(t, out)
	require.Equal(t, "STOPPED", exec["status"])
	require.Equal(t, batch.MessageDrained, exec["exitMessage"])
	require.Less(t, exec["chunksDone"].(float64), float64(72))

	s.StartWorker()
	status, again := s.Post("/v1/jobs/aptTrade/requests", body)
	require.Equal(t, http.StatusAccepted, status)
	require.Equal(t, exec["id"], again["resumesExecutionId"])
	done := s.WaitRequest(again["requestId"].(string), "DONE", "FAILED")
	require.Equal(t, "COMPLETED", apptest.Execution(t, done)["status"], "%v", done)
	require.Equal(t, int64(72), s.Fake.Stats().Total)
	apptest.RequireEachKeyOnce(t, s, 72)
}

// A CLI run and a worker racing on the same job: exactly one runs, the other
// gets 409 or exit code 4; executions never overlap (20 repetitions). In the
// first ten the winner is held inside its first call, so the loser must be
// refused (each side wins in turn); the last ten start both at once.
func TestProcess_CLIAndWorkerRace(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := apptest.New(t, nil)
	s.StartWorker()
	env := s.ProcessEnv(nil)
	body := apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-02")
	requestLine := regexp.MustCompile(`^request (\d+): aptTrade`)
	cliArgs := []string{"run", "aptTrade", "-p", "regions=11110", "-p", "from=2025-01", "-p", "to=2025-02"}

	for rep := range 20 {
		held := rep < 10
		if held {
			s.Gate.Arm(0)
		}
		var cli *radarProcess
		var status int
		var out map[string]any
		switch {
		case held && rep%2 == 0: // the worker wins
			status, out = s.Post("/v1/jobs/aptTrade/requests", body)
			require.Equal(t, http.StatusAccepted, status)
			apptest.Within(t, time.Minute, s.Gate.Blocked, "a held provider call")
			cli = startRadar(t, bin, env, cliArgs...)
			require.Equal(t, exitDuplicate, cli.Wait(t, 60*time.Second), "rep %d:\n%s", rep, cli.Output())
		case held: // the CLI wins
			cli = startRadar(t, bin, env, cliArgs...)
			cli.waitLine(t, requestLine)
			apptest.Within(t, time.Minute, s.Gate.Blocked, "a held provider call")
			status, out = s.Post("/v1/jobs/aptTrade/requests", body)
			require.Equal(t, http.StatusConflict, status, "rep %d: %v", rep, out)
		default: // both at once
			cli = startRadar(t, bin, env, cliArgs...)
			status, out = s.Post("/v1/jobs/aptTrade/requests", body)
		}
		s.Gate.Open()
		code := cli.Wait(t, 60*time.Second)
		if status == http.StatusAccepted {
			s.WaitRequest(out["requestId"].(string), "DONE")
		}
		require.Contains(t, []int{exitOK, exitDuplicate}, code, "rep %d:\n%s", rep, cli.Output())
		require.Contains(t, []int{http.StatusAccepted, http.StatusConflict}, status, "rep %d: %v", rep, out)
		require.False(t, code == exitDuplicate && status == http.StatusConflict, "rep %d: both refused", rep)
	}
	require.Equal(t, 0, s.Count(`SELECT count(*) FROM job_execution a JOIN job_execution b ON a.id < b.id
		WHERE a.started_at < b.ended_at AND b.started_at < a.ended_at`), "no two executions overlapped")
	require.Equal(t, 0, s.Count("SELECT count(*) FROM job_execution WHERE status <> 'COMPLETED'"))
	require.GreaterOrEqual(t, s.Count("SELECT count(*) FROM job_request WHERE source = 'cli' AND status = 'DONE'"), 5)
	require.GreaterOrEqual(t, s.Count("SELECT count(*) FROM job_request WHERE source = 'api' AND status = 'DONE'"), 5)
}

// The CLI: usage errors exit 2, Ctrl-C drains to STOPPED (exit 3), a run to
// the end exits 0.
func TestProcess_CLIExitCodes(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := apptest.New(t, &apptest.Opts{Fake: fakeupstream.Config{Latency: 30 * time.Millisecond}})
	env := s.ProcessEnv(nil)

	require.Equal(t, exitUsage, startRadar(t, bin, env, "run").Wait(t, 30*time.Second))
	require.Equal(t, exitUsage, startRadar(t, bin, env, "run", "nope").Wait(t, 30*time.Second))
	bad := startRadar(t, bin, env, "run", "aptTrade", "-p", "regions=1111", "-p", "from=2025-01", "-p", "to=2025-02")
	require.Equal(t, exitUsage, bad.Wait(t, 30*time.Second))
	require.Contains(t, bad.Output(), "params.regions[0]")
	require.Equal(t, 0, s.Count("SELECT count(*) FROM job_request"))

	cli := startRadar(t, bin, env, "run", "aptTrade", "--params", `{"regions":["11110","11140"],"from":"2025-01","to":"2025-12"}`)
	cli.waitLine(t, regexp.MustCompile(`chunk 3/24 committed`))
	require.NoError(t, cli.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, exitStopped, cli.Wait(t, 30*time.Second))
	require.Contains(t, cli.Output(), "STOPPED")

	capped := startRadar(t, bin, env, "run", "aptTrade", "--params", `{"regions":["11110","11140"],"from":"2025-01","to":"2025-12"}`, "--max-calls", "2")
	require.Equal(t, exitStopped, capped.Wait(t, 60*time.Second), capped.Output())
	require.Contains(t, capped.Output(), "maxCalls")

	resume := startRadar(t, bin, env, "run", "aptTrade", "--params", `{"regions":["11110","11140"],"from":"2025-01","to":"2025-12"}`)
	require.Equal(t, exitOK, resume.Wait(t, 60*time.Second), resume.Output())
	require.Contains(t, resume.Output(), "resuming execution")
	apptest.RequireEachKeyOnce(t, s, 24)
}

// Ctrl-C on `radar dev` leaves no PostgreSQL behind, and kill -9 does not
// block the next start either.
func TestProcess_DevLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	env := map[string]string{
		"DATABASE_URL": "", "BUILDRISK_HTTP_ADDR": "127.0.0.1:0", "BUILDRISK_LOG_FORMAT": "text",
		"BUILDRISK_API_TOKENS": "operator:" + apptest.OperatorToken, "BUILDRISK_UPSTREAM_URL": "",
	}
	started := regexp.MustCompile(`pglocal: postgres started.*dir=(\S+) port=(\d+)`)

	dev := startRadar(t, bin, env, "dev")
	m := dev.waitLine(t, started)
	dev.waitLine(t, regexp.MustCompile(`buildrisk-radar dev is up`))
	require.NoError(t, dev.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, 0, dev.Wait(t, 60*time.Second))
	requireClusterGone(t, m[1], m[2])

	killed := startRadar(t, bin, env, "dev")
	m = killed.waitLine(t, started)
	killed.waitLine(t, regexp.MustCompile(`buildrisk-radar dev is up`))
	require.NoError(t, killed.cmd.Process.Kill())
	killed.Wait(t, 30*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for portOpen(m[2]) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // the postmaster dies with its parent (Pdeathsig)
	}
	require.False(t, portOpen(m[2]), "postgres outlived a kill -9 of radar dev")

	again := startRadar(t, bin, env, "dev")
	again.waitLine(t, regexp.MustCompile(`buildrisk-radar dev is up`))
	_, err := os.Stat(m[1])
	require.True(t, os.IsNotExist(err), "the next start swept the dead run's directory %s", m[1])
	require.NoError(t, again.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, 0, again.Wait(t, 60*time.Second))
}

func requireClusterGone(t *testing.T, dir, port string) {
	t.Helper()
	_, err := os.Stat(dir)
	require.True(t, os.IsNotExist(err), "cluster dir %s still exists", dir)
	require.False(t, portOpen(port), "postgres still listens on %s", port)
}

func portOpen(port string) bool {
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 200*time.Millisecond)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// api and worker refuse a schema that is behind, saying to run `radar
// migrate`; `radar migrate` is idempotent; afterwards the api serves.
func TestProcess_MigrateAndSchemaCheck(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	admin, err := pgx.Connect(context.Background(), pgtest.AdminURL(t))
	require.NoError(t, err)
	defer admin.Close(context.Background())
	name := fmt.Sprintf("radar_empty_%d", time.Now().UnixNano())
	_, err = admin.Exec(context.Background(), "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)") })
	cfg, err := pgx.ParseConfig(pgtest.AdminURL(t))
	require.NoError(t, err)
	url := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, name)
	env := map[string]string{
		"DATABASE_URL": url, "BUILDRISK_API_TOKENS": "operator:" + apptest.OperatorToken, "BUILDRISK_HTTP_ADDR": "127.0.0.1:0",
		"BUILDRISK_ADMIN_ADDR": "127.0.0.1:0", "BUILDRISK_LOG_FORMAT": "text",
	}

	for _, role := range []string{"api", "worker"} {
		p := startRadar(t, bin, env, role)
		require.Equal(t, exitUsage, p.Wait(t, 30*time.Second), role)
		require.Contains(t, p.Output(), "run `radar migrate`", role)
	}
	for range 2 {
		m := startRadar(t, bin, env, "migrate")
		require.Equal(t, exitOK, m.Wait(t, 60*time.Second), m.Output())
		require.Contains(t, m.Output(), "schema is current")
	}
	api := startRadar(t, bin, env, "api")
	api.waitLine(t, regexp.MustCompile(`api listening`))
	require.NoError(t, api.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, exitOK, api.Wait(t, 30*time.Second))
}

// `radar fakeupstream` serves the providers and its admin endpoints.
func TestProcess_FakeUpstream(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	fake := startRadar(t, bin, nil, "fakeupstream", "--addr", "127.0.0.1:0", "--latency", "1ms", "--seed", "7")
	base := "http://" + fake.waitLine(t, regexp.MustCompile(`listening on (\S+)`))[1]

	resp, err := http.Get(base + "/1613000/RTMSDataSvcAptTrade/getRTMSDataSvcAptTrade?serviceKey=k&LAWD_CD=11110&DEAL_YMD=202501&pageNo=1&numOfRows=10")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var stats struct {
		Total int64                       `json:"total"`
		Calls map[string]map[string]int64 `json:"calls"`
	}
	getJSON := func() {
		resp, err := http.Get(base + "/__fake/stats")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&stats))
	}
	getJSON()
	require.Equal(t, int64(1), stats.Total)
	require.Equal(t, int64(1), stats.Calls["aptTrade"]["11110:202501"])

	resp, err = http.Post(base+"/__fake/config", "application/json", strings.NewReader(`{"latency":"2ms","errorRate":0.05,"rate429":0,"emptyRate":0}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = http.Post(base+"/__fake/config", "application/json", strings.NewReader(`{"latency":"soon"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, err = http.Post(base+"/__fake/reset", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	getJSON()
	require.Equal(t, int64(0), stats.Total)

	require.Equal(t, exitUsage, startRadar(t, bin, nil, "fakeupstream", "--error-rate", "2").Wait(t, 10*time.Second))
	require.NoError(t, fake.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, exitOK, fake.Wait(t, 10*time.Second))
}

// `radar run` frees a job whose request a dead worker holds, like the api
// does: its enqueue's cleanup fails that request and cancels its River job
// through River's API, although the CLI's own request has no River job.
func TestProcess_CLIFreesADeadWorkersRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin := buildRadar(t)
	s := apptest.New(t, nil)
	held := &apptest.HeldRun{Fetched: make(chan int64, 1)}
	workers := river.NewWorkers()
	river.AddWorker(workers, river.Worker[catalog.RequestArgs](held))
	dead, err := river.NewClient(riverpgxv5.New(s.Pool), &river.Config{
		ID: "9@dead-host#b00t", Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}}, Workers: workers,
		FetchCooldown: river.FetchCooldownMin, FetchPollInterval: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, dead.Start(ctx))
	defer func() {
		stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		require.NoError(t, dead.StopAndCancel(stopCtx))
	}()
	stale := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	select {
	case <-held.Fetched:
	case <-time.After(30 * time.Second):
		t.Fatal("the dead worker's River client did not fetch the job within 30s")
	}

	cli := startRadar(t, bin, s.ProcessEnv(nil), "run", "aptTrade", "-p", "regions=11110", "-p", "from=2025-01", "-p", "to=2025-01")
	require.Equal(t, exitOK, cli.Wait(t, time.Minute), cli.Output())
	_, old := s.Get("/v1/requests/" + stale)
	require.Equal(t, "FAILED", old["status"])
	require.Contains(t, old["message"], "worker 9@dead-host#b00t stopped heartbeating")
	require.Equal(t, 1, s.Count("SELECT count(*) FROM river_job j JOIN job_request r ON r.river_job_id = j.id WHERE r.id = $1 AND j.metadata ? 'cancel_attempted_at'", stale),
		"the dead worker's River job is cancelled through River")
}

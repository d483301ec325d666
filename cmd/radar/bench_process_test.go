package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// maxRSS runs bin and returns its peak resident set in MB: the process's
// own high-water mark (VmHWM), read every few milliseconds until it exits.
// getrusage's maxrss is no use here: Linux carries the forking test
// process's resident set over into the child's across exec.
func maxRSS(t *testing.T, bin string, env map[string]string, args ...string) float64 {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var peakKB int64
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	ticker := time.NewTicker(5 * time.Millisecond)
	defer ticker.Stop()
	for {
		if raw, err := os.ReadFile(status); err == nil {
			for line := range strings.Lines(string(raw)) {
				if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
					var kb int64
					if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err == nil && kb > peakKB {
						peakKB = kb
					}
				}
			}
		}
		select {
		case err := <-done:
			require.NoError(t, err, "%s", out.String())
			return float64(peakKB) / 1024
		case <-ticker.C:
		}
	}
}

// benchImportMemory: peak RSS of `radar import exposure` at two file sizes.
func benchImportMemory(t *testing.T, scale benchScale, bin string) *benchRow {
	s := apptest.New(t, nil)
	write := func(n int) string {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("exposure-%d.csv", n))
		f, err := os.Create(path)
		require.NoError(t, err)
		w := bufio.NewWriter(f)
		fmt.Fprintln(w, "corp_code,outstanding_krw")
		for i := range n {
			fmt.Fprintf(w, "%08d,%d\n", 10_000_000+i, 1_000_000+i)
		}
		require.NoError(t, w.Flush())
		require.NoError(t, f.Close())
		return path
	}
	small, big := write(scale.importSmall), write(scale.importBig)
	env := s.ProcessEnv(nil)
	row := &benchRow{name: fmt.Sprintf("`radar import exposure` peak RSS, %d lines", scale.importBig), unit: "MB",
		refName: fmt.Sprintf("%d lines", scale.importSmall), target: "≤ 1.3"}
	for range scale.reps {
		row.add(maxRSS(t, bin, env, "import", "exposure", big), maxRSS(t, bin, env, "import", "exposure", small))
	}
	return row
}

// benchWorkerMemory: peak RSS of a creditEval run (`radar run`, the
// worker's runner in a process) at two target counts, FANOUT 64, 0 ms calls.
func benchWorkerMemory(t *testing.T, scale benchScale, bin string) *benchRow {
	peak := func(n int) float64 {
		s := apptest.New(t, &apptest.Opts{Fake: fakeupstream.Config{Companies: max(n+1, fakeupstream.CompaniesDefault)}})
		seedTargets(t, s, n)
		return maxRSS(t, bin, s.ProcessEnv(map[string]string{"BUILDRISK_FANOUT": "64", "BUILDRISK_DAILY_CAP_CREDIT": "1000000"}), "run", credit.Name)
	}
	row := &benchRow{name: fmt.Sprintf("worker peak RSS, creditEval %d targets (radar run, FANOUT 64)", scale.workerBig), unit: "MB",
		refName: fmt.Sprintf("%d targets", scale.workerSmall), target: "≤ 1.3"}
	for range scale.reps {
		row.add(peak(scale.workerBig), peak(scale.workerSmall))
	}
	return row
}

// benchDrain: SIGTERM to a worker process in the middle of a 1 s chunk;
// the figure is how long after that chunk's call answered the process
// exited.
func benchDrain(t *testing.T, scale benchScale, bin string) *benchRow {
	row := &benchRow{name: "drain: SIGTERM → exit, beyond the chunk in flight (1 s chunks)", unit: "ms", target: "small"}
	for range scale.reps {
		s := apptest.New(t, &apptest.Opts{Fake: fakeupstream.Config{Latency: time.Second}})
		w := startRadar(t, bin, s.ProcessEnv(nil), "worker")
		w.waitLine(t, regexp.MustCompile(`worker running`))
		s.Gate.Arm(0)
		s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-03"))
		<-s.Gate.Blocked // the first chunk's call is at the provider
		require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
		opened := time.Now()
		s.Gate.Open() // the provider answers one latency (1 s) after the gate opens
		require.Equal(t, 0, w.Wait(t, time.Minute))
		exited := time.Now()
		row.figure = append(row.figure, float64(exited.Sub(opened.Add(time.Second)).Microseconds())/1000)
	}
	return row
}

// benchStale: kill -9 of a worker process holding a request; the figure is
// how long until its request is FAILED by a live worker's reaper, against
// the configured window (STALE_AFTER + REAP_INTERVAL).
func benchStale(t *testing.T, scale benchScale, bin string) *benchRow {
	row := &benchRow{name: "stale detection: kill -9 → request FAILED", unit: "s", refName: "STALE_AFTER 2 s + REAP_INTERVAL 0.5 s", target: "≤ 1"}
	for range scale.reps {
		s := apptest.New(t, nil)
		w := startRadar(t, bin, s.ProcessEnv(nil), "worker")
		w.waitLine(t, regexp.MustCompile(`worker running`))
		s.Gate.Arm(0)
		id := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-03"))
		<-s.Gate.Blocked
		s.StartWorker() // the survivor that reaps
		require.NoError(t, w.cmd.Process.Kill())
		killed := time.Now()
		s.WaitRequest(id, "FAILED")
		s.Gate.Open()
		row.add(time.Since(killed).Seconds(), (s.Env.StaleAfter + s.Env.ReapInterval).Seconds())
	}
	return row
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/queue/worker"
)

// outageSecondsDefault is the outage TestProcess_OutageLogsOncePerProcess
// causes when BUILDRISK_OUTAGE_SECONDS is unset: short enough for make
// test, long enough for a heartbeat and a probe (every 10 s) to fail in it.
// CI sets 60, the outage the bound is stated for.
const outageSecondsDefault = 15

// outageLength is the outage the test causes (BUILDRISK_OUTAGE_SECONDS).
func outageLength(t *testing.T) time.Duration {
	t.Helper()
	raw := os.Getenv("BUILDRISK_OUTAGE_SECONDS")
	if raw == "" {
		return outageSecondsDefault * time.Second
	}
	n, err := strconv.Atoi(raw)
	require.NoError(t, err, "BUILDRISK_OUTAGE_SECONDS")
	require.Positive(t, n, "BUILDRISK_OUTAGE_SECONDS")
	return time.Duration(n) * time.Second
}

// maxLoudLinesPerOutage is the requirement's bound: a 60 s database outage
// yields at most this many WARN and ERROR lines per process.
const maxLoudLinesPerOutage = 10

// logEntry is one JSON log line of a radar process.
type logEntry struct {
	raw   string
	level string
	msg   string
	attrs map[string]any
}

// logEntries parses a process's output from offset on; a line that is not
// a JSON object is returned apart (a process logging JSON writes none).
func logEntries(output string, offset int) (entries []logEntry, other []string) {
	for _, line := range strings.Split(output[offset:], "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var attrs map[string]any
		if json.Unmarshal([]byte(line), &attrs) != nil {
			other = append(other, line)
			continue
		}
		level, _ := attrs["level"].(string)
		msg, _ := attrs["msg"].(string)
		entries = append(entries, logEntry{raw: line, level: level, msg: msg, attrs: attrs})
	}
	return entries, other
}

// multiLine reports whether any string in v spans several lines.
func multiLine(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.Contains(v, "\n")
	case map[string]any:
		for _, e := range v {
			if multiLine(e) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if multiLine(e) {
				return true
			}
		}
	}
	return false
}

// ready reports whether GET url answers 200.
func ready(url string) bool {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// The real `radar api` and `radar worker`, at the production intervals
// (heartbeat and database probe every 10 s, stale after 60 s, reap every
// 30 s), through a database outage of BUILDRISK_OUTAGE_SECONDS (default 15;
// CI runs 60): each process logs the outage once when it starts (its
// heartbeat, the api's database probe) and the recovery once when the
// database is back, writes at most ten WARN or ERROR lines in all from the
// halt until both are ready again, have logged their recovery, and a
// heartbeat interval more has passed, and no INFO line carries a
// multi-line text. Every line either writes is JSON.
func TestProcess_OutageLogsOncePerProcess(t *testing.T) {
	t.Parallel()
	outage := outageLength(t)
	// The outage outlasts a heartbeat interval by far: each process's
	// first failed pass falls inside it.
	require.GreaterOrEqual(t, outage, worker.HeartbeatIntervalDefault+5*time.Second, "BUILDRISK_OUTAGE_SECONDS")
	bin := buildRadar(t)
	cluster, url := apptest.PrivateCluster(t)
	s := apptest.New(t, &apptest.Opts{DBURL: url})
	env := s.ProcessEnv(map[string]string{"BUILDRISK_LOG_FORMAT": "json", "BUILDRISK_HTTP_ADDR": "127.0.0.1:0"})
	// The production intervals, not the tests' shortened ones.
	for _, k := range []string{"BUILDRISK_HEARTBEAT_INTERVAL", "BUILDRISK_STALE_AFTER", "BUILDRISK_REAP_INTERVAL", "BUILDRISK_DRAIN_TIMEOUT"} {
		delete(env, k)
	}

	api := startRadar(t, bin, env, "api")
	apiAddr := api.waitLine(t, regexp.MustCompile(`"msg":"api listening".*"addr":"([^"]+)"`))[1]
	wrk := startRadar(t, bin, env, "worker")
	adminAddr := wrk.waitLine(t, regexp.MustCompile(`"msg":"worker running".*"admin_addr":"([^"]+)"`))[1]
	procs := []struct {
		name            string
		p               *radarProcess
		ready           string
		start, recovery string // the lines that log the outage and its end
	}{
		{"api", api, "http://" + apiAddr + "/readyz", "database probe failed", "database probe recovered"},
		{"worker", wrk, "http://" + adminAddr + "/readyz", "heartbeat failed", "heartbeat recovered"},
	}
	for _, pr := range procs {
		apptest.WaitUntil(t, time.Minute, pr.name+" to be ready", func() bool { return ready(pr.ready) })
	}

	offsets := make([]int, len(procs))
	for i, pr := range procs {
		offsets[i] = len(pr.p.Output())
	}
	halted := time.Now()
	require.NoError(t, cluster.Halt())
	// The outage is the test's input: it lasts its full length, whatever
	// the processes do meanwhile (nothing polls them, so that no probe of
	// the test's own adds to what they log).
	time.Sleep(time.Until(halted.Add(outage)))
	require.NoError(t, cluster.Resume(context.Background()))
	resumed := time.Now()
	t.Logf("postgres was down for %s", resumed.Sub(halted).Round(time.Millisecond))

	for i, pr := range procs {
		apptest.WaitUntil(t, 2*time.Minute, pr.name+" to be ready again", func() bool { return ready(pr.ready) })
		recovery := `"msg":"` + pr.recovery + `"`
		apptest.WaitUntil(t, 2*time.Minute, pr.name+" to log its recovery", func() bool {
			return strings.Contains(pr.p.Output()[offsets[i]:], recovery)
		})
	}
	recovered := time.Now()
	// A heartbeat interval more: a loop that still fails after the
	// recovery fails within it.
	settle := worker.HeartbeatIntervalDefault
	time.Sleep(time.Until(recovered.Add(settle)))
	t.Logf("ready again, recovery logged, %s after the resume; counted until %s later", recovered.Sub(resumed).Round(time.Millisecond), settle)

	for i, pr := range procs {
		entries, other := logEntries(pr.p.Output(), offsets[i])
		require.Empty(t, other, "%s: lines that are not JSON", pr.name)
		var loud []string
		perMessage := map[string]int{}
		for _, e := range entries {
			perMessage[e.level+" "+e.msg]++
			switch e.level {
			case "WARN", "ERROR":
				loud = append(loud, fmt.Sprintf("%s %s %s", e.attrs["time"], e.level, e.msg))
			case "INFO":
				require.False(t, multiLine(e.attrs), "%s: an INFO line carries a multi-line text: %s", pr.name, e.raw)
			}
		}
		t.Logf("%s: %d WARN/ERROR lines through a %s outage:\n%s", pr.name, len(loud), outage, strings.Join(loud, "\n"))
		require.LessOrEqual(t, len(loud), maxLoudLinesPerOutage, "%s: WARN/ERROR lines through the outage", pr.name)
		require.Equal(t, 1, perMessage["WARN "+pr.start], "%s: the outage's start, logged once", pr.name)
		require.Equal(t, 1, perMessage["INFO "+pr.recovery], "%s: the recovery, logged once", pr.name)
	}
}

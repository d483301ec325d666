package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// kill -9 of a worker in the middle of creditEval, then a new request: the
// API's cleanup (or the reaper; BUILDRISK_STALE_AFTER is 2s here) frees the
// job, an in-process worker resumes it, and every target ends with exactly
// one grade for the day — no duplicate, none missing — and at most
// 2 × BUILDRISK_FANOUT calls are repeated (the fake's per-key counts). The
// ledger is loaded with the real `radar import exposure`, from a file with
// bad lines.
func TestCreditEval_KillNineThenResume(t *testing.T) {
	t.Parallel()
	const fanOut = 6
	bin := buildRadar(t)
	s := apptest.New(t, &apptest.Opts{
		Fake: fakeupstream.Config{Latency: 5 * time.Millisecond, EmptyRate: 0.05},
		Env:  map[string]string{"BUILDRISK_FANOUT": fmt.Sprint(fanOut)},
	})
	env := s.ProcessEnv(nil)

	// The ledger: 3,000 companies, with three bad lines among them.
	companies := s.Fake.Companies()
	var csv strings.Builder
	csv.WriteString("corp_code,outstanding_krw\n")
	for i, c := range companies {
		switch i {
		case 100:
			csv.WriteString("1234567,5\n") // line 102
		case 200:
			csv.WriteString(c.CorpCode + ",-5\n") // line 203
		case 300:
			csv.WriteString(c.CorpCode + ",12,extra\n") // line 304
		}
		fmt.Fprintf(&csv, "%s,%d\n", c.CorpCode, 1_000_000+i)
	}
	path := filepath.Join(t.TempDir(), "exposure.csv")
	require.NoError(t, os.WriteFile(path, []byte(csv.String()), 0o600))
	imported := startRadar(t, bin, env, "import", "exposure", path)
	require.Equal(t, exitFailed, imported.Wait(t, 60*time.Second), "some lines were bad: exit 1")
	out := imported.Output()
	require.Contains(t, out, path+":102: corp_code \"1234567\" is not an 8-digit DART corp code")
	require.Contains(t, out, path+":203: outstanding_krw \"-5\" is not an integer >= 0")
	require.Contains(t, out, path+":304: 3 fields, want 2")
	require.Contains(t, out, fmt.Sprintf("loaded %d companies", len(companies)))
	require.Contains(t, out, "3 bad lines skipped")
	require.Equal(t, len(companies), s.Count(`SELECT count(*) FROM exposure`))

	worker := startRadar(t, bin, env, "worker")
	worker.waitLine(t, regexp.MustCompile(`worker running`))
	accepted := s.RequestCreditEval(`{}`)
	id := accepted["requestId"].(string)
	deadline := time.Now().Add(60 * time.Second)
	var killed map[string]any
	for {
		_, out := s.Get("/v1/requests/" + id)
		if exec, ok := out["execution"].(map[string]any); ok && exec["chunksDone"].(float64) >= 1 {
			killed = exec
			break
		}
		require.True(t, time.Now().Before(deadline), "no chunk committed: %v", out)
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, worker.cmd.Process.Kill()) // kill -9, mid-chunk
	worker.Wait(t, 30*time.Second)
	require.Less(t, killed["chunksDone"].(float64), float64(3), "killed mid-run")

	s.StartWorker()
	var resumed map[string]any
	deadline = time.Now().Add(30 * time.Second)
	for {
		status, out := s.Post("/v1/jobs/creditEval/requests", `{"params":{}}`)
		if status == http.StatusAccepted {
			resumed = out
			break
		}
		require.Equal(t, http.StatusConflict, status, "%v", out)
		require.True(t, time.Now().Before(deadline), "the dead worker's request was never freed")
		time.Sleep(50 * time.Millisecond) // until the dead worker's heartbeat is stale (2s)
	}
	first := s.WaitRequest(id, "DONE", "FAILED")
	require.Equal(t, "FAILED", first["status"], "the killed run's request is failed by the cleanup")
	require.Equal(t, killed["id"], resumed["resumesExecutionId"], "the new request resumes the killed execution")

	done := s.WaitRequest(resumed["requestId"].(string), "DONE", "FAILED")
	exec := apptest.Execution(t, done)
	require.Equal(t, "COMPLETED", exec["status"], "%v", done)
	require.Equal(t, float64(len(companies)), exec["targets"])
	require.Equal(t, 1, s.Count(`SELECT count(DISTINCT eval_date) FROM credit_grade`))
	require.Equal(t, len(companies), s.Count(`SELECT count(*) FROM credit_grade`), "no duplicate")
	require.Zero(t, s.Count(`SELECT count(*) FROM exposure e WHERE outstanding_krw > 0
		AND NOT EXISTS (SELECT 1 FROM credit_grade g WHERE g.corp_code = e.corp_code)`), "none missing")
	// Only the evaluations in flight at the kill, or whose part was
	// committing, are called again: at most 2 × FANOUT are ever paid for and
	// not yet committed.
	lookups := s.CallsPerKey(fakeupstream.EndpointCreditLookup)
	require.Len(t, lookups, len(companies))
	repeated := 0
	for _, n := range lookups {
		repeated += int(n) - 1
	}
	t.Logf("lookups repeated after kill -9: %d", repeated)
	require.LessOrEqual(t, repeated, 2*fanOut, "at most 2 × BUILDRISK_FANOUT calls repeated")
}

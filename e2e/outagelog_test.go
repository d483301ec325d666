package e2e_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/apptest"
)

// A database outage is logged when it starts, not once per failed pass:
// through an outage that lasts until the heartbeat has failed 40 passes
// (about 8 s at the tests' 200 ms interval), an idle api and worker (one
// process here) write each warning or error at most once, and a handful in
// all (before, a 20 s outage wrote 289 lines: the heartbeat, gauges and
// reap failing every pass, River's fetch loop about four times a second).
func TestOutage_LogsTheOutageOnceNotPerPass(t *testing.T) {
	t.Parallel()
	cluster, url := apptest.PrivateCluster(t)
	logs := &apptest.SyncBuffer{}
	s := apptest.New(t, &apptest.Opts{DBURL: url, Logs: logs})
	w, _ := s.StartWorker()
	apptest.WaitUntil(t, time.Minute, "the worker to be ready", func() bool { return w.Ready(context.Background()) == nil })
	before := len(logs.String())

	require.NoError(t, cluster.Halt())
	// The outage lasts until the heartbeat has failed 40 passes (each is
	// logged, at DEBUG from the second on: the test's logger keeps DEBUG).
	apptest.WaitUntil(t, 2*time.Minute, "40 failed heartbeats", func() bool {
		return strings.Count(logs.String()[before:], `"msg":"heartbeat failed"`) >= 40
	})
	require.NoError(t, cluster.Resume(context.Background()))
	apptest.WaitUntil(t, time.Minute, "the worker to be ready again", func() bool { return w.Ready(context.Background()) == nil })

	var loud []string
	perMessage := map[string]int{}
	for _, line := range strings.Split(logs.String()[before:], "\n") {
		var entry struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && (entry.Level == "WARN" || entry.Level == "ERROR") {
			loud = append(loud, entry.Level+" "+entry.Msg)
			perMessage[entry.Msg]++
		}
	}
	t.Logf("%d WARN/ERROR lines through the outage:\n%s", len(loud), strings.Join(loud, "\n"))
	for msg, n := range perMessage {
		require.Equal(t, 1, n, "%q logged %d times", msg, n)
	}
	require.LessOrEqual(t, len(loud), 10, "the api and the worker together")
}

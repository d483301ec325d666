package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/apptest"
)

// lockedBuffer is a bytes.Buffer several goroutines log into.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A database outage is logged when it starts, not once per failed pass:
// through a 20 s outage an idle api and worker (one process here) write
// each warning or error at most once, and a handful in all (before, 289
// lines: the heartbeat, gauges and reap failing every pass, River's fetch
// loop about four times a second).
func TestOutage_LogsTheOutageOnceNotPerPass(t *testing.T) {
	t.Parallel()
	cluster, url := apptest.PrivateCluster(t)
	logs := &lockedBuffer{}
	s := apptest.New(t, &apptest.Opts{DBURL: url, Logs: logs})
	w, _ := s.StartWorker()
	apptest.WaitUntil(t, time.Minute, "the worker to be ready", func() bool { return w.Ready(context.Background()) == nil })
	before := len(logs.String())

	require.NoError(t, cluster.Halt())
	time.Sleep(20 * time.Second) // the fault: the outage's length
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
	t.Logf("%d WARN/ERROR lines through a 20 s outage:\n%s", len(loud), strings.Join(loud, "\n"))
	for msg, n := range perMessage {
		require.Equal(t, 1, n, "%q logged %d times", msg, n)
	}
	require.LessOrEqual(t, len(loud), 10, "the api and the worker together")
}

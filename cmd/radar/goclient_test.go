package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// The example program (examples/goclient, the oapi-codegen client) runs
// against a real system: it requests a run with an Idempotency-Key, retries
// it with the same key (the same request, replayed), reads the duplicate's
// 409 type and activeRequestId, polls the run to DONE and reads a 400's
// field errors.
// Provider calls take 200 ms, so the duplicate surely meets an active run.
func TestGoClientExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the example program")
	}
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Fake: fakeupstream.Config{Latency: 200 * time.Millisecond}})
	s.StartWorker()

	bin := filepath.Join(t.TempDir(), "goclient")
	build := exec.Command("go", "build", "-o", bin, "./examples/goclient")
	build.Dir = filepath.Join("..", "..")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	run := exec.CommandContext(t.Context(), bin, "-url", s.API.URL, "-token", apptest.OperatorToken, "-timeout", "1m")
	out, err = run.CombinedOutput()
	t.Logf("examples/goclient:\n%s", out)
	require.NoError(t, err)
	requested := regexp.MustCompile(`requested: request (\d+), QUEUED`).FindStringSubmatch(string(out))
	require.NotNil(t, requested, "%s", out)
	require.Contains(t, string(out), "retried with the same Idempotency-Key: request "+requested[1]+" again (Idempotent-Replayed: true)")
	require.Contains(t, string(out), "duplicate: 409 /problems/duplicate-active-request, activeRequestId "+requested[1])
	require.Regexp(t, `request \d+: DONE \(execution \d+ COMPLETED, 4/4 chunks\)`, string(out))
	require.Regexp(t, `field body\.params\.\S+: `, string(out))
}

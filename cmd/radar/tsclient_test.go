package main

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// requireNodeEnv makes a missing Node.js or npm fail the TypeScript client
// test instead of skipping it; .ci/run sets it.
const requireNodeEnv = "BUILDRISK_REQUIRE_NODE"

// A strict TypeScript client generated from the document a live system
// serves (openapi-typescript, pinned in examples/tsclient) type-checks
// (strict, exactOptionalPropertyTypes, noUncheckedIndexedAccess) and runs
// the README walk-through against that system through openapi-fetch: a
// request with an Idempotency-Key, its replay, the duplicate's 409 by its
// problem type, the run to DONE and a 400's field errors. A document whose
// types are wrong for the answers fails to compile or to run.
func TestTSClientWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("installs the TypeScript toolchain and runs the walk-through")
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv(requireNodeEnv) == "1" {
				t.Fatalf("%s is not installed and %s=1: apt-get install -y nodejs npm", tool, requireNodeEnv)
			}
			t.Skipf("%s is not installed (apt-get install -y nodejs npm); %s=1 makes this a failure", tool, requireNodeEnv)
		}
	}
	t.Parallel()
	dir := t.TempDir()
	for _, name := range []string{"package.json", "package-lock.json", "tsconfig.json", "walkthrough.ts"} {
		src, err := os.ReadFile(filepath.Join("..", "..", "examples", "tsclient", name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), src, 0o644))
	}
	inDir := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s %v:\n%s", name, args, out)
		return string(out)
	}
	inDir("npm", "ci", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error")

	s := apptest.New(t, &apptest.Opts{Fake: fakeupstream.Config{Latency: 200 * time.Millisecond}})
	s.StartWorker()
	resp, err := http.Get(s.API.URL + "/openapi.json")
	require.NoError(t, err)
	doc, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", doc)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "openapi.json"), doc, 0o644))

	inDir("npx", "--no-install", "openapi-typescript", "openapi.json", "-o", "schema.d.ts")
	inDir("npx", "--no-install", "tsc", "-p", ".")
	out := inDir("node", filepath.Join("build", "walkthrough.js"), s.API.URL, apptest.OperatorToken)
	t.Logf("examples/tsclient:\n%s", out)
	requested := regexp.MustCompile(`requested: request (\d+), QUEUED`).FindStringSubmatch(out)
	require.NotNil(t, requested, "%s", out)
	require.Contains(t, out, "retried with the same Idempotency-Key: request "+requested[1]+" again (Idempotent-Replayed: true)")
	require.Contains(t, out, "duplicate: 409 /problems/duplicate-active-request, activeRequestId "+requested[1])
	require.Regexp(t, `request \d+: DONE \(execution \d+ COMPLETED, 4/4 chunks\)`, out)
	require.Regexp(t, `field body\.params\.\S+: `, out)
}

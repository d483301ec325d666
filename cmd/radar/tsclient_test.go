package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// requireNodeEnv makes a missing Node.js or npm fail the TypeScript client
// test instead of skipping it; .ci/run sets it.
const requireNodeEnv = "BUILDRISK_REQUIRE_NODE"

// tsclientFiles are examples/tsclient's sources the test copies: one npm
// install for every generator.
var tsclientFiles = []string{
	"package.json", "package-lock.json", "tsconfig.json", "tsconfig.generators.json",
	"walkthrough.ts", "walkthrough-heyapi.ts", "walkthrough-orval.ts",
	"openapi-ts.config.mjs", "orval.config.mjs", "validate.mjs",
}

// Three TypeScript clients generated from the document a live system
// serves (examples/tsclient, one npm install, versions pinned in its
// package-lock.json) run the README walk-through against that system:
//   - openapi-typescript's types, called through openapi-fetch, compiled
//     strict (exactOptionalPropertyTypes, noUncheckedIndexedAccess);
//   - hey-api's SDK with its zod plugin (default options), which checks
//     every request and answer with the generated zod schemas;
//   - orval's fetch client, every answer parsed by orval's zod schemas.
//
// The walk-through: a request with an Idempotency-Key, its replay, the
// duplicate's 409 by its problem type, the run to DONE and a 400's field
// errors; hey-api's and orval's also read the job list and every job,
// with a schedule on (its next due time is a date-time zod checks). Both
// documents (3.1 and the 3.0 copy) must pass @apidevtools/swagger-parser.
// The generators run side by side. A document whose types are wrong for
// the answers fails to generate, to compile or to run.
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
	for _, name := range tsclientFiles {
		src, err := os.ReadFile(filepath.Join("..", "..", "examples", "tsclient", name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), src, 0o644))
	}
	run := func(name string, args ...string) (string, error) {
		cmd := exec.CommandContext(t.Context(), name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("%s %s: %w:\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	inDir := func(name string, args ...string) string {
		t.Helper()
		out, err := run(name, args...)
		require.NoError(t, err)
		return out
	}
	inDir("npm", "ci", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error")

	// rules on a schedule: the job list carries its next due time.
	s := apptest.New(t, &apptest.Opts{
		Fake: fakeupstream.Config{Latency: 200 * time.Millisecond},
		Env:  map[string]string{"BUILDRISK_SCHEDULE_RULES": "0 6 1 1 *", "BUILDRISK_SCHEDULE_CATCHUP_RULES": "1ms"},
	})
	s.StartWorker()
	for file, path := range map[string]string{"openapi.json": "/openapi.json", "openapi-3.0.json": "/openapi-3.0.json"} {
		resp, err := http.Get(s.API.URL + path)
		require.NoError(t, err)
		doc, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", doc)
		require.NoError(t, os.WriteFile(filepath.Join(dir, file), doc, 0o644))
	}

	// The generators and the validator side by side, then both compiles.
	parallel(t, [][]string{
		{"node", "validate.mjs", "openapi.json", "openapi-3.0.json"},
		{"npx", "--no-install", "openapi-typescript", "openapi.json", "-o", "schema.d.ts"},
		{"npx", "--no-install", "openapi-ts"},
		{"npx", "--no-install", "orval", "--config", "orval.config.mjs"},
	}, run)
	parallel(t, [][]string{
		{"npx", "--no-install", "tsc", "-p", "."},
		{"npx", "--no-install", "tsc", "-p", "tsconfig.generators.json"},
	}, run)

	nextUTC := regexp.MustCompile(`jobs: 7 listed and read; next rules \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
	for _, client := range []string{"walkthrough", "walkthrough-heyapi", "walkthrough-orval"} {
		out := inDir("node", filepath.Join("build", client+".js"), s.API.URL, apptest.OperatorToken)
		t.Logf("examples/tsclient %s:\n%s", client, out)
		requested := regexp.MustCompile(`requested: request (\d+), QUEUED`).FindStringSubmatch(out)
		require.NotNil(t, requested, "%s: %s", client, out)
		require.Contains(t, out, "retried with the same Idempotency-Key: request "+requested[1]+" again (Idempotent-Replayed: true)", client)
		require.Contains(t, out, "duplicate: 409 /problems/duplicate-active-request, activeRequestId "+requested[1], client)
		require.Regexp(t, `request \d+: DONE \(execution \d+ COMPLETED, 4/4 chunks\)`, out, client)
		require.Regexp(t, `field body\.params\.\S+: `, out, client)
		if client != "walkthrough" {
			require.Regexp(t, nextUTC, out, client)
		}
	}
}

// parallel runs each command with run at once and fails t with every
// command's error once all have ended.
func parallel(t *testing.T, commands [][]string, run func(string, ...string) (string, error)) {
	t.Helper()
	errs := make([]error, len(commands))
	var wg sync.WaitGroup
	for i, c := range commands {
		wg.Go(func() { _, errs[i] = run(c[0], c[1:]...) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
}

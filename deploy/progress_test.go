package deploy

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// progressScript is what `make run` builds bin/radar through.
var progressScript = filepath.Join("..", "tools", "progress.sh")

// A long build under tools/progress.sh is never silent: while the command
// runs, a line says it still goes with the time elapsed and the packages
// `go build -v` listed so far; the command's own messages pass through,
// its package lines do not, and its exit status is the script's.
func TestProgress_HeartbeatWhileTheBuildRuns(t *testing.T) {
	t.Parallel()

	done := filepath.Join(t.TempDir(), "done")
	// A stand-in build: two packages and a message, then it waits (at
	// most 60 s) until the test has seen a heartbeat.
	build := `echo github.com/example/a; echo "go: downloading example.com/b v1.0.0"; echo example.com/b/c
i=0; while [ ! -f "$DONE" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; exit 3`
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", progressScript, "building bin/radar", "sh", "-c", build)
	cmd.Env = append(os.Environ(), "PROGRESS_INTERVAL=1", "DONE="+done)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())

	heartbeat := regexp.MustCompile(`^building bin/radar: still going, 0m0[0-9]s elapsed, 2 packages compiled$`)
	var lines []string
	scanner := bufio.NewScanner(stdout)
	for scanner.Scan() {
		lines = append(lines, scanner.Text())
		if heartbeat.MatchString(scanner.Text()) {
			require.NoError(t, os.WriteFile(done, nil, 0o600))
			break
		}
	}
	for scanner.Scan() {
		lines = append(lines, scanner.Text())
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "the script exits with the build's status: %v\n%s", err, strings.Join(lines, "\n"))
	require.Equal(t, 3, exit.ExitCode())
	require.FileExists(t, done, "no heartbeat line came:\n%s", strings.Join(lines, "\n"))
	require.Contains(t, lines, "go: downloading example.com/b v1.0.0")
	require.NotContains(t, lines, "github.com/example/a")
}

// make run builds through tools/progress.sh with go build -v, and tells a
// first run how long a cold build took.
func TestProgress_MakeRunUsesIt(t *testing.T) {
	t.Parallel()

	data, err := os.ReadFile(filepath.Join("..", "Makefile"))
	require.NoError(t, err)
	makefile := string(data)
	require.Regexp(t, `(?m)^run:\n(\t.*\n)*\t@sh tools/progress\.sh "building bin/radar" \$\(MAKE\) --no-print-directory build BUILD_VERBOSE=-v\n`, makefile)
	require.Regexp(t, `(?m)^COLD_BUILD = [0-9]+m[0-9]+s$`, makefile)
	require.Contains(t, makefile, "$(COLD_BUILD) on the reference machine")
}

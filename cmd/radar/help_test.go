package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// `radar COMMAND --help` prints the command's usage and starts nothing: no
// database, no listener, no directory (before, `radar dev --help` started
// the whole system). DATABASE_URL is unset, so a dev that started would
// create its cluster and .radar in the working directory.
func TestHelp_StartsNothing(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Setenv("BUILDRISK_HTTP_ADDR", "127.0.0.1:1") // a listener would fail
	dir := t.TempDir()
	t.Chdir(dir)
	for command := range commandUsage {
		for _, flag := range []string{"--help", "-h", "help"} {
			var stdout, stderr bytes.Buffer
			code := run([]string{command, flag}, &stdout, &stderr)
			require.Equal(t, exitOK, code, "radar %s %s: %s", command, flag, stderr.String())
			require.True(t, strings.HasPrefix(stdout.String(), "usage: radar "+command), "radar %s %s: %q", command, flag, stdout.String())
			require.Empty(t, stderr.String())
		}
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "help left something in the working directory")
}

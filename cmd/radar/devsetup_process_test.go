package main

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/apptest"
)

// devEnv is the environment of a `radar dev` under test: an embedded
// PostgreSQL, the fake upstream, text logs.
func devEnv(httpAddr string) map[string]string {
	return map[string]string{
		"DATABASE_URL": "", "BUILDRISK_HTTP_ADDR": httpAddr, "BUILDRISK_LOG_FORMAT": "text",
		"BUILDRISK_API_TOKENS": "operator:" + apptest.OperatorToken, "BUILDRISK_UPSTREAM_URL": "",
	}
}

// `radar dev` whose api port is taken exits non-zero at once, naming the
// address, before it starts PostgreSQL (which took seconds, then migrated
// and seeded, before the port was found taken).
func TestProcess_DevRefusesATakenAPIPort(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = taken.Close() })

	started := time.Now()
	dev := startRadarIn(t, t.TempDir(), bin, devEnv(taken.Addr().String()), "dev")
	code := dev.Wait(t, 30*time.Second)
	t.Logf("radar dev exited %d after %s", code, time.Since(started).Round(time.Millisecond))
	require.NotEqual(t, 0, code)
	out := dev.Output()
	require.Contains(t, out, "BUILDRISK_HTTP_ADDR "+taken.Addr().String())
	require.NotContains(t, out, "starting an embedded PostgreSQL", "the port is checked before PostgreSQL starts")
	require.NotContains(t, out, "pglocal")
}

// BUILDRISK_DEV_FAKE_ADDR moves dev's fake upstream, and dev writes the
// fake's base URL to .radar/dev-fake-url (the walk-through reads it there),
// removing it on exit.
func TestProcess_DevFakeAddr(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	free, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	fakeAddr := free.Addr().String()
	require.NoError(t, free.Close())

	dir := t.TempDir()
	env := devEnv("127.0.0.1:0")
	env[devFakeAddrEnv] = fakeAddr
	dev := startRadarIn(t, dir, bin, env, "dev")
	dev.waitLine(t, regexp.MustCompile(`buildrisk-radar dev is up`))
	dev.waitLine(t, regexp.MustCompile(`Upstream\s+fake; stats at http://`+regexp.QuoteMeta(fakeAddr)+`/__fake/stats`))

	data, err := os.ReadFile(filepath.Join(dir, devFakeURLFile))
	require.NoError(t, err)
	url := strings.TrimSpace(string(data))
	require.Equal(t, "http://"+fakeAddr, url)
	resp, err := http.Get(url + "/__fake/stats")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	require.NoError(t, dev.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, 0, dev.Wait(t, 60*time.Second))
	_, err = os.Stat(filepath.Join(dir, devFakeURLFile))
	require.True(t, os.IsNotExist(err), "dev removes %s on exit", devFakeURLFile)
}

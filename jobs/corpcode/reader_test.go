package corpcode

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/upstream"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// fakeArchive saves the fake upstream's corp-code archive to a file.
func fakeArchive(t *testing.T) string {
	t.Helper()
	server := httptest.NewServer(fakeupstream.New(fakeupstream.Config{Seed: 1}))
	defer server.Close()
	resp, err := http.Get(server.URL + upstream.EndpointCorpCode.Path + "?crtfc_key=k")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	path := filepath.Join(t.TempDir(), "corpcode.zip")
	require.NoError(t, os.WriteFile(path, body, 0o600))
	return path
}

// Chunks read in order share one parse of the archive, and together give
// exactly the archive's companies; asking for an earlier chunk parses anew.
// Not parallel: it counts the passes through the package's parse hook.
func TestChunkReader_OneParsePerExecution(t *testing.T) {
	path := fakeArchive(t)
	var all []upstream.CorpCode
	require.NoError(t, upstream.ReadCorpCodes(path, func(c upstream.CorpCode) error { all = append(all, c); return nil }))
	require.Greater(t, len(all), 2500)

	var passes atomic.Int32
	readCorpCodes = func(path string, fn func(upstream.CorpCode) error) error {
		passes.Add(1)
		return upstream.ReadCorpCodes(path, fn)
	}
	defer func() { readCorpCodes = upstream.ReadCorpCodes }()

	const size = 1000
	key := new(int) // an execution
	r := readerFor(key, path, "sum")
	var got []upstream.CorpCode
	for first := 0; first < len(all); first += size {
		chunk, err := readerFor(key, path, "sum").read(first, first+size)
		require.NoError(t, err)
		require.LessOrEqual(t, len(chunk), size)
		got = append(got, chunk...)
	}
	require.Equal(t, all, got)
	require.Equal(t, int32(1), passes.Load(), "one parse for every chunk of the execution")

	again, err := r.read(size, 2*size)
	require.NoError(t, err)
	require.Equal(t, all[size:2*size], again)
	require.Equal(t, int32(2), passes.Load(), "an earlier chunk starts a new parse")

	releaseReader(key)
	_, ok := readers.Load(key)
	require.False(t, ok)
}

package app_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/internal/config"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/app"
)

// spaces is an endless reader of spaces (valid JSON whitespace), so a body
// costs the client nothing.
type spaces struct{}

func (spaces) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

// A 10 MB body is answered 413 before it is read into memory, with or
// without a Content-Length, on the raw-body request endpoint and elsewhere;
// the API allocates far less than the body while refusing it. Not parallel:
// it measures the process's allocations.
func TestBounded_BodyOverLimitIs413(t *testing.T) {
	s := apptest.New(t, nil)
	const size = 10 << 20
	post := func(path string, chunked bool) int {
		body := io.LimitReader(spaces{}, size)
		req, err := http.NewRequest(http.MethodPost, s.API.URL+path, body)
		require.NoError(t, err)
		if chunked {
			req.ContentLength = -1 // Transfer-Encoding: chunked
		} else {
			req.ContentLength = size
		}
		req.Header.Set("Authorization", "Bearer "+apptest.OperatorToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		answer, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		if resp.StatusCode == http.StatusRequestEntityTooLarge {
			require.Contains(t, string(answer), "over the limit of 1048576 bytes")
		}
		return resp.StatusCode
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, path := range []string{"/v1/jobs/aptTrade/requests", "/v1/jobs/creditEval/requests", "/v1/jobs/nosuchjob/requests", "/v1/jobs/aptTrade/stop"} {
		for _, chunked := range []bool{false, true} {
			require.Equal(t, http.StatusRequestEntityTooLarge, post(path, chunked), "%s chunked=%v", path, chunked)
		}
	}
	runtime.ReadMemStats(&after)
	grew := after.TotalAlloc - before.TotalAlloc
	t.Logf("8 posts of 10 MB: the process allocated %.1f MB", float64(grew)/(1<<20))
	require.Less(t, grew, uint64(20<<20), "the bodies were not read into memory")

	// Within the limit the body reaches the handler (400 names the field).
	status, out := s.Post("/v1/jobs/aptTrade/requests", `{"params":{"regions":["1"],"from":"2025-01","to":"2025-01"}}`+strings.Repeat(" ", 1<<19))
	require.Equal(t, http.StatusBadRequest, status, "%v", out)
}

// A bad value is quoted in a short truncated snippet, not echoed whole.
func TestBounded_ErrorsQuoteASnippet(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	huge := strings.Repeat("9", 900_000)
	status, out := s.Post("/v1/jobs/aptTrade/requests", `{"params":{"regions":["`+huge+`"],"from":"2025-01","to":"2025-01"}}`)
	require.Equal(t, http.StatusBadRequest, status)
	detail := out["detail"].(string)
	require.Contains(t, detail, "params.regions[0]")
	require.Contains(t, detail, "(900000 bytes)")
	require.Less(t, len(detail), 300, detail)
	for _, path := range []string{"/v1/requests?limit=" + huge[:5000], "/v1/requests?status=" + huge[:5000], "/v1/requests?job=" + huge[:5000], "/v1/jobs/" + huge[:5000]} {
		raw := s.Raw(path)
		require.Less(t, len(raw), 1000, "%s: %s", path[:20], raw)
	}
}

// The api and admin listeners drop a client that never finishes its
// headers (slowloris) after the read-header timeout.
func TestBounded_ServerTimeouts(t *testing.T) {
	t.Parallel()
	d := app.ServerTimeoutsDefault
	for name, v := range map[string]time.Duration{"ReadHeader": d.ReadHeader, "Read": d.Read, "Write": d.Write, "Idle": d.Idle} {
		require.Positive(t, v, name)
	}
	require.Greater(t, d.Write, 2*config.APIStatementTimeoutMax, "a call's database deadline (two statements) ends before the write timeout")

	listener, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := app.NewHTTPServer(http.NotFoundHandler(), app.ServerTimeouts{ReadHeader: 50 * time.Millisecond, Read: time.Second, Write: time.Second, Idle: time.Second})
	go func() { _ = srv.Serve(listener) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })

	conn, err := net.Dial("tcp", listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n")) // never ends
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	_, err = io.ReadAll(bufio.NewReader(conn))
	require.NoError(t, err, "the server closed the connection (a deadline error means it never did)")
}

// gatedBody sends head bytes, then holds the rest back until release is
// closed: a server that waits for the whole body before answering never
// answers while the gate is shut.
type gatedBody struct {
	head    io.Reader
	release <-chan struct{}
	sent    *atomic.Int64
}

func (b *gatedBody) Read(p []byte) (int, error) {
	n, err := b.head.Read(p)
	b.sent.Add(int64(n))
	if err == io.EOF {
		<-b.release
		return 0, io.EOF
	}
	return n, err
}

// An anonymous caller is refused (401) before any of its body is read: 120
// anonymous chunked uploads at once each get their 401 while their body is
// still held back by the client, and 120 full 1 MiB anonymous chunked
// uploads allocate far less than one of them each. Not parallel: it
// measures the process's allocations.
func TestBounded_AnonymousBodyIsNotRead(t *testing.T) {
	s := apptest.New(t, nil)
	const uploads = 120
	transport := &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: uploads}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 20 * time.Second}
	paths := []string{"/v1/jobs/aptTrade/requests", "/v1/jobs/aptTrade/stop", "/riverui/api/jobs/cancel"}
	// upload returns the answer's status, or closedUnread when the server
	// closed the connection while the client was still sending the body
	// (its 401 and Connection: close raced the upload's writes): either way
	// the server read none of the rest.
	const closedUnread = -1
	upload := func(path string, body io.Reader) int {
		req, err := http.NewRequest(http.MethodPost, s.API.URL+path, body)
		require.NoError(t, err)
		req.ContentLength = -1 // Transfer-Encoding: chunked
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			return closedUnread
		}
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}

	// The 401 comes while the body is held back.
	var sent atomic.Int64
	var wg sync.WaitGroup
	for i := range uploads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			release := make(chan struct{})
			timer := time.AfterFunc(5*time.Second, func() { close(release) })
			defer timer.Stop()
			start := time.Now()
			status := upload(paths[i%len(paths)], &gatedBody{head: io.LimitReader(spaces{}, 16<<10), release: release, sent: &sent})
			if timer.Stop() {
				close(release)
			}
			if status != http.StatusUnauthorized || time.Since(start) >= 5*time.Second {
				t.Errorf("upload %d: status %d after %v: the server waited for the body", i, status, time.Since(start))
			}
		}()
	}
	wg.Wait()

	// 120 whole 1 MiB bodies: the api allocates a small part of one each.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
		}
	}()
	for i := range uploads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status := upload(paths[i%len(paths)], io.LimitReader(spaces{}, 1<<20-1))
			if status != http.StatusUnauthorized && status != closedUnread {
				t.Errorf("upload %d: status %d", i, status)
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	runtime.ReadMemStats(&after)
	grew := after.TotalAlloc - before.TotalAlloc
	peakGrowth := int64(peak.Load()) - int64(before.HeapInuse)
	t.Logf("%d anonymous chunked uploads of 1 MiB: the process allocated %.1f MiB, heap in use peaked %.1f MiB above the start",
		uploads, float64(grew)/(1<<20), float64(peakGrowth)/(1<<20))
	require.Less(t, grew, uint64(40<<20), "anonymous bodies were read into memory")
}

// A GET or HEAD carries no body, so a viewer's is refused (400) before any
// of it is read: each answer comes while the body is still held back by
// the client after its first 16 KiB, where a server buffering the body (up
// to BUILDRISK_MAX_BODY_BYTES, per connection) would wait for the rest.
func TestBounded_GetBodyIsNotRead(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 20 * time.Second}
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		for _, path := range []string{"/v1/jobs", "/v1/requests?limit=1", "/"} {
			var sent atomic.Int64
			release := make(chan struct{})
			timer := time.AfterFunc(5*time.Second, func() { close(release) })
			req, err := http.NewRequest(method, s.API.URL+path, &gatedBody{head: io.LimitReader(spaces{}, 16<<10), release: release, sent: &sent})
			require.NoError(t, err)
			req.ContentLength = -1 // Transfer-Encoding: chunked
			req.Header.Set("Authorization", "Bearer "+apptest.ViewerToken)
			start := time.Now()
			resp, err := client.Do(req)
			answered := time.Since(start)
			if timer.Stop() {
				close(release)
			}
			if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
				continue // closed while the client still sent: nothing more read
			}
			require.NoError(t, err, "%s %s", method, path)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s %s", method, path)
			require.Less(t, answered, 5*time.Second, "%s %s: the server waited for the body", method, path)
			require.LessOrEqual(t, sent.Load(), int64(16<<10), "%s %s", method, path)
		}
	}
	status, out := s.Get("/v1/jobs")
	require.Equal(t, http.StatusOK, status, "a GET without a body: %v", out)
}

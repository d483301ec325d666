package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// During slow-provider the proxy hands the caller the fake's headers at
// once and then the body one byte a second; once the fault ends, the rest
// comes at full speed. The call is recorded whole.
func TestRecordingProxy_Trickle(t *testing.T) {
	t.Parallel()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"grade":"A"}`)
	}))
	t.Cleanup(upstream.Close)
	ev := &Evidence{}
	p := &recordingProxy{target: upstream.URL, ev: ev, client: upstream.Client()}
	proxy := httptest.NewServer(p)
	t.Cleanup(proxy.Close)
	p.trickle.Store(true)

	began := time.Now()
	resp, err := http.Get(proxy.URL + "/credit/v1/grades?corpCode=1")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Less(t, time.Since(began), 900*time.Millisecond, "the headers come at once")
	first := make([]byte, 1)
	_, err = io.ReadFull(resp.Body, first)
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(began), time.Second, "the first byte a second later")
	p.trickle.Store(false)
	rest, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, `{"grade":"A"}`, string(first)+string(rest))
	require.Less(t, time.Since(began), 3*time.Second, "the rest at full speed once the fault ends")

	require.Eventually(t, func() bool {
		ev.mu.Lock()
		defer ev.mu.Unlock()
		return len(ev.Calls) == 1
	}, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, UpstreamCall{At: ev.Calls[0].At, Endpoint: "creditLookup", Params: map[string]string{"corpCode": "1"}, Status: 200}, ev.Calls[0])
	require.Empty(t, p.callsInFlight())
}

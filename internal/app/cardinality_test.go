package app_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/apptest"
)

// No metric label takes its value from the request: 1,000 anonymous and
// authenticated requests with distinct Host headers (and ports), paths and
// job names leave the number of series /metrics serves unchanged. otelhttp
// would label server.address and server.port from the Host, before any
// authentication.
func TestBounded_MetricSeriesIgnoreTheRequest(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	role := apptest.StartAPI(t, s.APIPool, s.Env, s.Tel)
	srv := httptest.NewServer(role.Handler())
	t.Cleanup(srv.Close)

	send := func(i int, host string) {
		var req *http.Request
		var err error
		switch i % 5 {
		case 0:
			req, err = http.NewRequest(http.MethodGet, srv.URL+"/healthz", nil)
		case 1:
			req, err = http.NewRequest(http.MethodGet, srv.URL+fmt.Sprintf("/nothing/here-%d", i), nil)
		case 2:
			req, err = http.NewRequest(http.MethodPost, srv.URL+fmt.Sprintf("/v1/jobs/job%d/requests", i), strings.NewReader(`{}`))
			req.Header.Set("Authorization", "Bearer "+apptest.OperatorToken)
			req.Header.Set("Content-Type", "application/json")
		case 3:
			req, err = http.NewRequest(http.MethodGet, srv.URL+fmt.Sprintf("/v1/requests/%d", 1_000_000+i), nil)
			req.Header.Set("Authorization", "Bearer "+apptest.ViewerToken)
		case 4:
			req, err = http.NewRequest(http.MethodGet, srv.URL+fmt.Sprintf("/v1/jobs?q=%d", i), nil)
			req.Header.Set("User-Agent", fmt.Sprintf("agent-%d", i))
		}
		require.NoError(t, err)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
	}
	series := func() []string {
		resp, err := http.Get(srv.URL + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var out []string
		for line := range strings.Lines(string(raw)) {
			if !strings.HasPrefix(line, "#") && strings.TrimSpace(line) != "" {
				name, _, _ := strings.Cut(line, " ")
				out = append(out, name)
			}
		}
		slices.Sort(out)
		return out
	}

	// Every kind of request once, so that each series it makes exists.
	for i := range 5 {
		send(i, "radar.internal")
	}
	series()
	before := series()
	for i := range 1000 {
		send(i, fmt.Sprintf("h%d.attacker.example:%d", i, 1024+i))
	}
	after := series()
	var added []string
	for _, name := range after {
		if _, found := slices.BinarySearch(before, name); !found {
			added = append(added, name)
		}
	}
	require.Empty(t, added[:min(len(added), 3)], "%d new series", len(added))
	require.Len(t, after, len(before))
}

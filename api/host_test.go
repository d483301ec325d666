package api_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/apptest"
)

// sendHost sends method path to s's api with the given Host header (and
// Origin, for a POST, as a browser on that host would), and token when not
// "", and returns the status.
func sendHost(t *testing.T, s *apptest.System, method, path, host, token string) int {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	}
	req, err := http.NewRequest(method, s.API.URL+path, body)
	require.NoError(t, err)
	req.Host = host
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", "http://"+host)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode
}

// Without authentication a browser on the user's network is the only
// guard, and DNS rebinding defeats the cross-origin check: the attacker's
// page, its name now resolving to the api, sends Host and Origin both its
// own. Insecure mode therefore serves only loopback names (or
// BUILDRISK_ALLOWED_HOSTS): any other Host is answered 421 before anything
// runs. The probes answer whatever the Host.
func TestHost_InsecureModeRefusesARebindingHost(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_INSECURE_NO_AUTH": "1"}})
	_, port, err := net.SplitHostPort(strings.TrimPrefix(s.API.URL, "http://"))
	require.NoError(t, err)
	rebound := "attacker.example:" + port
	require.Equal(t, http.StatusMisdirectedRequest, sendHost(t, s, http.MethodPost, "/v1/jobs/aptTrade/requests", rebound, ""))
	require.Equal(t, http.StatusMisdirectedRequest, sendHost(t, s, http.MethodGet, "/v1/jobs", rebound, ""))
	require.Equal(t, http.StatusMisdirectedRequest, sendHost(t, s, http.MethodGet, "/", rebound, ""))
	require.Equal(t, 0, s.Count("SELECT count(*) FROM job_request"), "nothing was requested")
	require.Equal(t, http.StatusOK, sendHost(t, s, http.MethodGet, "/healthz", rebound, ""))

	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port, "LOCALHOST"} {
		require.Equal(t, http.StatusOK, sendHost(t, s, http.MethodGet, "/v1/jobs", host, ""), host)
	}
	require.Equal(t, http.StatusAccepted, sendHost(t, s, http.MethodPost, "/v1/jobs/aptTrade/requests", "localhost:"+port, ""))

	// BUILDRISK_ALLOWED_HOSTS replaces the loopback names.
	named := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_INSECURE_NO_AUTH": "1", "BUILDRISK_ALLOWED_HOSTS": "radar.internal"}})
	require.Equal(t, http.StatusOK, sendHost(t, named, http.MethodGet, "/v1/jobs", "radar.internal:8080", ""))
	require.Equal(t, http.StatusMisdirectedRequest, sendHost(t, named, http.MethodGet, "/v1/jobs", "localhost", ""))
}

// With authentication on, any Host is served unless BUILDRISK_ALLOWED_HOSTS
// says otherwise: a rebound page has no credential to send.
func TestHost_AuthModeServesAnyHostUnlessListed(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	require.Equal(t, http.StatusOK, sendHost(t, s, http.MethodGet, "/v1/jobs", "anything.example", apptest.ViewerToken))
	listed := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_ALLOWED_HOSTS": "radar.example.com, 10.0.0.7"}})
	require.Equal(t, http.StatusOK, sendHost(t, listed, http.MethodGet, "/v1/jobs", "Radar.Example.COM.", apptest.ViewerToken))
	require.Equal(t, http.StatusOK, sendHost(t, listed, http.MethodGet, "/v1/jobs", "10.0.0.7:8080", apptest.ViewerToken))
	require.Equal(t, http.StatusMisdirectedRequest, sendHost(t, listed, http.MethodGet, "/v1/jobs", "anything.example", apptest.ViewerToken))
	require.Equal(t, http.StatusOK, sendHost(t, listed, http.MethodGet, "/readyz", "10.1.2.3:8080", ""), "probes are not checked")
}

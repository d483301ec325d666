package api_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/api"
	"github.com/buildrisk/radar/observability/observabilitytest"
)

// Token guessing is limited per client: after AuthFailuresMax wrong bearer
// tokens or logins, every credential the client sends (even a right one)
// answers 429 with Retry-After until the window ends; each failure is
// counted in buildrisk_auth_failures_total{via}, and the client is logged
// once, with its address, not once per guess. A caller without credentials
// is not affected.
func TestAuth_FailedAttemptsAreLimited(t *testing.T) {
	t.Parallel()
	logs := &apptest.SyncBuffer{}
	s := apptest.New(t, &apptest.Opts{Logs: logs})
	for i := range api.AuthFailuresMax - 2 {
		status, _ := s.Do(http.MethodGet, "/v1/jobs", "wrong-token-0123456789abcdef0123456789-"+strconv.Itoa(i), "")
		require.Equal(t, http.StatusUnauthorized, status, i)
	}
	c := apptest.NewConsoleClient(t, s.API)
	for range 2 {
		require.Equal(t, http.StatusUnauthorized, c.Login("wrong-login-token-0123456789abcdef0123").StatusCode)
	}
	req, err := http.NewRequest(http.MethodGet, s.API.URL+"/v1/jobs", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+apptest.OperatorToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "limited: even the right token waits")
	retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.Positive(t, retry)
	resp, _ = c.Send(http.MethodPost, "/login", "application/x-www-form-urlencoded", url.Values{"token": {apptest.OperatorToken}}.Encode(), nil)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))

	resp, err = http.Get(s.API.URL + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "no credentials: not limited")

	bearer, err := observabilitytest.MetricValue(s.Tel.Providers, "buildrisk_auth_failures_total", map[string]string{"via": "bearer"})
	require.NoError(t, err)
	require.Equal(t, float64(api.AuthFailuresMax-2), bearer)
	login, err := observabilitytest.MetricValue(s.Tel.Providers, "buildrisk_auth_failures_total", map[string]string{"via": "login"})
	require.NoError(t, err)
	require.Equal(t, float64(2), login)
	lines := strings.Count(logs.String(), "authentication failed")
	require.Equal(t, 1, lines, "one line per client and window:\n%s", logs.String())
	require.Contains(t, logs.String(), "127.0.0.1")
	require.NotContains(t, logs.String(), "wrong-token-", "a guess is never logged")
}

package api_test

import (
	"fmt"
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

// sendToken sends GET /v1/jobs with token from the client forwarded, when
// not "", in X-Forwarded-For, and returns the answer's status and
// Retry-After.
func sendToken(t *testing.T, s *apptest.System, token, forwarded string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.API.URL+"/v1/jobs", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if forwarded != "" {
		req.Header.Set("X-Forwarded-For", forwarded)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// wrongToken is the i-th wrong token of a test.
func wrongToken(i int) string { return "wrong-token-0123456789abcdef0123456789-" + strconv.Itoa(i) }

// Token guessing is limited per client: after AuthFailuresMax wrong bearer
// tokens or logins, every wrong credential the client sends answers 429
// with Retry-After until the window ends, but a right one is never refused:
// behind a proxy every client shares one address. Each failure is counted
// in buildrisk_auth_failures_total{via}, and the client is logged once, with
// its address, not once per guess. X-Forwarded-For is not believed from a
// peer that is not a trusted proxy: the guesses below name a new address
// each and still count for the one they come from.
func TestAuth_FailedAttemptsAreLimited(t *testing.T) {
	t.Parallel()
	logs := &apptest.SyncBuffer{}
	s := apptest.New(t, &apptest.Opts{Logs: logs})
	for i := range api.AuthFailuresMax - 2 {
		status, _ := sendToken(t, s, wrongToken(i), fmt.Sprintf("203.0.113.%d", i))
		require.Equal(t, http.StatusUnauthorized, status, i)
	}
	c := apptest.NewConsoleClient(t, s.API)
	for range 2 {
		require.Equal(t, http.StatusUnauthorized, c.Login("wrong-login-token-0123456789abcdef0123").StatusCode)
	}
	status, retry := sendToken(t, s, wrongToken(99), "")
	require.Equal(t, http.StatusTooManyRequests, status, "limited: a wrong token waits")
	seconds, err := strconv.Atoi(retry)
	require.NoError(t, err)
	require.Positive(t, seconds)
	resp, _ := c.Send(http.MethodPost, "/login", "application/x-www-form-urlencoded", url.Values{"token": {"wrong-login-token-0123456789abcdef0123"}}.Encode(), nil)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))

	// The right credential from the same address is never refused.
	for _, token := range []string{apptest.OperatorToken, apptest.ViewerToken} {
		status, _ = sendToken(t, s, token, "")
		require.Equal(t, http.StatusOK, status, "a right token is never limited")
	}
	require.Equal(t, http.StatusSeeOther, c.Login(apptest.OperatorToken).StatusCode, "a right login is never limited")
	require.Contains(t, c.Page(), "Sign out")

	resp, err = http.Get(s.API.URL + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "no credentials: not limited")

	bearer, err := observabilitytest.MetricValue(s.Tel.Providers, "buildrisk_auth_failures_total", map[string]string{"via": "bearer"})
	require.NoError(t, err)
	require.Equal(t, float64(api.AuthFailuresMax-2+1), bearer)
	login, err := observabilitytest.MetricValue(s.Tel.Providers, "buildrisk_auth_failures_total", map[string]string{"via": "login"})
	require.NoError(t, err)
	require.Equal(t, float64(2+1), login)
	lines := strings.Count(logs.String(), "authentication failed")
	require.Equal(t, 1, lines, "one line per client and window:\n%s", logs.String())
	require.Contains(t, logs.String(), "127.0.0.1")
	require.NotContains(t, logs.String(), "203.0.113.", "X-Forwarded-For from an untrusted peer is not believed")
	require.NotContains(t, logs.String(), "wrong-token-", "a guess is never logged")
}

// Behind a trusted proxy (BUILDRISK_TRUSTED_PROXIES) the client is the
// address X-Forwarded-For names: one client's failures limit that client
// only, an IPv6 client by its /64, and the audit trail records the client.
// Failures of all clients together are limited too, so rotating addresses
// buys no more guesses; a right token is still never refused.
func TestAuth_LimitBehindATrustedProxy(t *testing.T) {
	t.Parallel()
	logs := &apptest.SyncBuffer{}
	s := apptest.New(t, &apptest.Opts{Logs: logs, Env: map[string]string{"BUILDRISK_TRUSTED_PROXIES": "127.0.0.1, 10.0.0.0/8"}})

	n, counted := 0, 0 // wrong tokens sent, failures answered 401
	fail := func(forwarded string, want int) {
		t.Helper()
		n++
		status, _ := sendToken(t, s, wrongToken(n), forwarded)
		require.Equal(t, want, status, forwarded)
		if status == http.StatusUnauthorized {
			counted++
		}
	}
	for range api.AuthFailuresMax {
		fail("198.51.100.7, 10.1.2.3", http.StatusUnauthorized) // through two proxies
	}
	fail("198.51.100.7", http.StatusTooManyRequests)
	fail("198.51.100.8", http.StatusUnauthorized)
	status, _ := sendToken(t, s, apptest.ViewerToken, "198.51.100.7")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, logs.String(), `"client":"198.51.100.7"`)

	for i := range api.AuthFailuresMax {
		fail(fmt.Sprintf("2001:db8:1:2::%x", i+1), http.StatusUnauthorized)
	}
	fail("2001:db8:1:2:ffff::1", http.StatusTooManyRequests) // the same /64
	fail("2001:db8:1:3::1", http.StatusUnauthorized)

	c := apptest.NewConsoleClient(t, s.API)
	resp, _ := c.Send(http.MethodPost, "/login", "application/x-www-form-urlencoded", url.Values{"token": {wrongToken(0)}}.Encode(),
		map[string]string{"X-Forwarded-For": "192.0.2.44"})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	counted++
	var audited int
	require.NoError(t, s.APIPool.QueryRow(t.Context(), `SELECT count(*) FROM audit_event WHERE action = 'login_failed' AND client = '192.0.2.44'`).Scan(&audited))
	require.Equal(t, 1, audited, "the audit trail records the forwarded client")

	// Each further failure from a new address: past the global cap, a wrong
	// token from an address never seen is limited too.
	for i := 0; counted < api.AuthGlobalFailuresMax; i++ {
		fail(fmt.Sprintf("192.0.2.%d", i%250+1), http.StatusUnauthorized)
	}
	fail("198.18.0.1", http.StatusTooManyRequests)
	status, _ = sendToken(t, s, apptest.OperatorToken, "198.18.0.1")
	require.Equal(t, http.StatusOK, status, "a right token is never limited")
}

// A forwarded address with an IPv6 zone of 8,000 characters is recorded
// as the normalized address: no zone, at most 64 characters, in the audit
// trail and the logs.
func TestAuth_ForwardedZoneIsDropped(t *testing.T) {
	t.Parallel()
	logs := &apptest.SyncBuffer{}
	s := apptest.New(t, &apptest.Opts{Logs: logs, Env: map[string]string{"BUILDRISK_TRUSTED_PROXIES": "127.0.0.1"}})
	zone := strings.Repeat("z", 8000)
	c := apptest.NewConsoleClient(t, s.API)
	resp, _ := c.Send(http.MethodPost, "/login", "application/x-www-form-urlencoded", url.Values{"token": {wrongToken(0)}}.Encode(),
		map[string]string{"X-Forwarded-For": "fe80::1%" + zone})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	var client string
	require.NoError(t, s.APIPool.QueryRow(t.Context(), `SELECT client FROM audit_event WHERE action = 'login_failed'`).Scan(&client))
	require.Equal(t, "fe80::1", client)
	require.NotContains(t, logs.String(), "zzzzzzzz")
	require.LessOrEqual(t, len(api.NormalizeClientAddr("[fe80::1%"+zone+"]:1234")), api.MaxClientAddrLen)
}

// Refused bearer tokens are audited, once per client and minute: six from
// one client make one token_refused record; a flood from 300 addresses
// makes no more records than AuthGlobalFailuresMax, so it cannot fill the
// table.
func TestAudit_RefusedBearerTokens(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_TRUSTED_PROXIES": "127.0.0.1"}})
	refused := func() int {
		var n int
		require.NoError(t, s.APIPool.QueryRow(t.Context(), `SELECT count(*) FROM audit_event WHERE action = 'token_refused'`).Scan(&n))
		return n
	}
	for i := range 6 {
		status, _ := sendToken(t, s, wrongToken(i), "198.51.100.9")
		require.Equal(t, http.StatusUnauthorized, status)
	}
	require.Equal(t, 1, refused(), "six refusals of one client in a minute: one record")
	var actor, client string
	require.NoError(t, s.APIPool.QueryRow(t.Context(), `SELECT actor, client FROM audit_event WHERE action = 'token_refused'`).Scan(&actor, &client))
	require.Equal(t, "anonymous", actor)
	require.Equal(t, "198.51.100.9", client)

	for i := range 300 {
		sendToken(t, s, wrongToken(i), fmt.Sprintf("2001:db8:%x::1", i+1)) // 300 clients (/64s)
	}
	require.LessOrEqual(t, refused(), api.AuthGlobalFailuresMax)
}

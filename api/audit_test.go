package api_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"
)

// The audit trail records who (the token's name), from where and what for
// every request, stop, login, failed login, logout and refused River UI
// mutation; GET /v1/audit shows it, newest first, to operators only.
func TestAudit_RecordsWhoDidWhat(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_API_TOKENS": "operator:alice:" + apptest.OpNew + ",viewer:" + apptest.ViewerToken}})
	status, out := s.Do(http.MethodPost, "/v1/jobs/aptTrade/requests", apptest.OpNew, apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	requestID := out["requestId"].(string)
	c := apptest.NewConsoleClient(t, s.API)
	require.Equal(t, http.StatusUnauthorized, c.Login("not-a-token-0123456789abcdef0123456789").StatusCode)
	c.Login(apptest.OpNew)
	c.Page()
	resp, _ := c.Send(http.MethodPost, "/logout", "application/x-www-form-urlencoded", url.Values{"csrf": {c.CSRF}}.Encode(), nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)

	status, _ = s.Do(http.MethodGet, "/v1/audit", apptest.ViewerToken, "")
	require.Equal(t, http.StatusForbidden, status, "operators only")
	status, out = s.Do(http.MethodGet, "/v1/audit?limit=2", apptest.OpNew, "")
	require.Equal(t, http.StatusOK, status, "%v", out)
	page := out["events"].([]any)
	require.Len(t, page, 2)
	require.NotNil(t, out["nextCursor"])
	status, out = s.Do(http.MethodGet, "/v1/audit", apptest.OpNew, "")
	require.Equal(t, http.StatusOK, status, "%v", out)
	var got []string
	for _, raw := range out["events"].([]any) {
		e := raw.(map[string]any)
		require.Equal(t, "127.0.0.1", e["client"], "%v", e)
		got = append(got, e["action"].(string)+" by "+e["actor"].(string)+" "+e["target"].(string)+" "+e["detail"].(string))
	}
	require.Equal(t, []string{
		"logout by alice  ",
		"login by alice  operator",
		"login_failed by anonymous  ",
		"request by alice aptTrade request " + requestID,
	}, got, "newest first")

	var n int
	require.NoError(t, s.Pool.QueryRow(t.Context(), "SELECT count(*) FROM job_request").Scan(&n)) // the worker's role: no audit rights
	refusedAPI := []string{"UPDATE audit_event SET actor = 'mallory'", "DELETE FROM audit_event", "TRUNCATE audit_event"}
	for _, stmt := range refusedAPI {
		_, err := s.APIPool.Exec(t.Context(), stmt)
		require.ErrorContains(t, err, "42501", "api: %s: the trail is append-only", stmt)
	}
	for _, stmt := range []string{"SELECT count(*) FROM audit_event", "INSERT INTO audit_event (actor, client, action) VALUES ('w', 'x', 'y')"} {
		_, err := s.Pool.Exec(t.Context(), stmt)
		require.ErrorContains(t, err, "42501", "worker: %s", stmt)
	}
}

package app_test

import (
	"encoding/json"
	"net"
	"net/http"
	"testing"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/internal/apptest"
	"github.com/stretchr/testify/require"
)

// A request records the name of the token that made it, by bearer token
// or through a console session; a token without a name, its fingerprint.
func TestEnv_RequestRecordsTheTokenName(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_API_TOKENS": "operator:alice:" + apptest.OpNew + ",operator:" + apptest.OpOld + ",viewer:" + apptest.ViewerToken}})
	requestedBy := func(id string) string {
		var by string
		require.NoError(t, s.Pool.QueryRow(t.Context(), "SELECT requested_by FROM job_request WHERE id = $1", id).Scan(&by))
		return by
	}
	status, out := s.Do(http.MethodPost, "/v1/jobs/aptTrade/requests", apptest.OpNew, apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	require.Equal(t, "alice", requestedBy(out["requestId"].(string)))
	status, out = s.Do(http.MethodPost, "/v1/jobs/stockPrice/requests", apptest.OpOld, `{"params":{"date":"2025-03-14"}}`)
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	require.Regexp(t, `^fp-[0-9a-f]{8}$`, requestedBy(out["requestId"].(string)))

	c := apptest.NewConsoleClient(t, s.API)
	c.Login(apptest.OpNew)
	c.Page()
	resp, body := c.Send(http.MethodPost, "/v1/jobs/corpCodeSync/requests", "application/json", `{"params":{}}`,
		map[string]string{"X-CSRF-Token": c.CSRF, "Sec-Fetch-Site": "same-origin"})
	require.Equal(t, http.StatusAccepted, resp.StatusCode, body)
	var created map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &created))
	require.Equal(t, "alice", requestedBy(created["requestId"].(string)), "the session carries the token's name")
}

// Both tokens of a role work during a rotation.
func TestEnv_RotationBothTokensWork(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_API_TOKENS": "operator:" + apptest.OpNew + ",operator:" + apptest.OpOld + ",viewer:" + apptest.ViewerToken}})
	for _, token := range []string{apptest.OpNew, apptest.OpOld} {
		status, out := s.Do(http.MethodPost, "/v1/jobs/aptTrade/stop", token, "")
		require.Equal(t, http.StatusConflict, status, "%s is an operator token: %v", token, out)
	}
	status, _ := s.Do(http.MethodPost, "/v1/jobs/aptTrade/stop", "op-gone-0123456789abcdef0123456789", "")
	require.Equal(t, http.StatusUnauthorized, status)
}

// A port already taken fails the role's Start, naming the variable that
// moves it.
func TestServeHTTP_TakenPortNamesTheVariable(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	role, err := app.NewAPI(s.APIPool, s.Env, s.Tel, app.APIOptions{HTTPAddr: taken.Addr().String()})
	require.NoError(t, err)
	err = role.Start(t.Context())
	require.ErrorContains(t, err, "set BUILDRISK_HTTP_ADDR to another address")
	require.NoError(t, role.Stop(t.Context()))
}

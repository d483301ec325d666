package api_test

import (
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/apptest"
)

// get sends a viewer's GET and returns the status and the body.
func get(t *testing.T, s *apptest.System, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.API.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+apptest.ViewerToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// No input makes a 5xx: a docs asset name the file system refuses is a
// 404, and a forged cursor (not base64, not UTF-8, a NUL, too long, the
// wrong shape) is a 400 naming query.cursor, decided before any SQL.
func TestInput_ForgedValuesAnswer4xx(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	status, _ := get(t, s, "/docs/assets/%ff")
	require.Equal(t, http.StatusNotFound, status)
	status, _ = get(t, s, "/docs/assets/a%00b")
	require.Equal(t, http.StatusNotFound, status)

	forged := []string{
		strings.Repeat("x", 200), "00126380", base64.RawURLEncoding.EncodeToString([]byte("a\x00b")),
		base64.RawURLEncoding.EncodeToString([]byte("\xff\xfe")), base64.RawURLEncoding.EncodeToString([]byte(strings.Repeat("a", 600))),
		"!!notbase64", base64.RawURLEncoding.EncodeToString([]byte("2025-01-01T00:00:00Z|a\x00b")),
	}
	for _, path := range []string{"/v1/coverage/creditEval/missing?cursor=", "/v1/workers?cursor=", "/v1/requests?cursor="} {
		for _, cursor := range forged {
			status, body := get(t, s, path+cursor)
			require.Equal(t, http.StatusBadRequest, status, "%s%q: %s", path, cursor, body)
			require.Contains(t, body, `"location":"query.cursor"`)
		}
	}
}

// A bad value of 60,000 bytes is quoted back in at most 40 bytes: every
// answer stays under 2 KB.
func TestInput_BadValuesQuotedBounded(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	huge := strings.Repeat("9", 60000)
	for _, path := range []string{
		"/v1/workers?limit=", "/v1/coverage/creditEval/missing?limit=", "/v1/jobs/creditEval/history?days=",
		"/v1/requests?limit=", "/v1/audit?limit=",
	} {
		status, body := get(t, s, path+huge)
		require.Contains(t, []int{http.StatusBadRequest, http.StatusForbidden}, status, path)
		require.Less(t, len(body), 2000, "%s echoed %d bytes", path, len(body))
		t.Logf("%s with a 60,000-byte value: %d answered, %d bytes", path, status, len(body))
		require.NotContains(t, body, strings.Repeat("9", 41), path)
	}
}

// A JSON null body is refused 400, not taken for an empty request.
func TestInput_NullBodyIsRefused(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	for _, path := range []string{"/v1/jobs/creditEval/requests", "/v1/jobs/creditEval/estimate"} {
		status, body := s.Post(path, "null")
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", path, body)
		require.Equal(t, "/problems/invalid-params", body["type"])
	}
	require.Equal(t, 0, s.Count("SELECT count(*) FROM job_request"))
}

// A bad value of 60,000 bytes in a JSON body is not echoed back whole
// either: the schema's refusal quotes at most 40 bytes of it.
func TestInput_BadBodyValueQuotedBounded(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	huge := strings.Repeat("9", 60000)
	for _, body := range []string{
		`{"params":{},"maxCalls":"` + huge + `"}`,
		`{"params":{},"confirmPurge":"` + huge + `"}`,
		`{"params":{"backfill":"` + huge + `"}}`,
	} {
		req, err := http.NewRequest(http.MethodPost, s.API.URL+"/v1/jobs/creditEval/requests", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+apptest.OperatorToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		answer, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%.300s", answer)
		require.Less(t, len(answer), 2000, "echoed %d bytes: %.300s", len(answer), answer)
	}
}

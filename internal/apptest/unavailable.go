package apptest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// UnavailableEnv shortens the api's database timeouts for these tests.
var UnavailableEnv = map[string]string{
	"BUILDRISK_API_STATEMENT_TIMEOUT": "1s",
	"BUILDRISK_API_LOCK_TIMEOUT":      "200ms",
}

// Require503 sends a call and requires a 503 with Retry-After and a
// problem body.
func Require503(t *testing.T, baseURL, method, path, body string) {
	t.Helper()
	status, header, out := Call(t, baseURL, method, path, body)
	require.Equal(t, http.StatusServiceUnavailable, status, "%s %s: %v", method, path, out)
	require.Equal(t, "2", header.Get("Retry-After"), "%s %s", method, path)
	if strings.HasPrefix(path, "/v1/") {
		require.Equal(t, "application/problem+json", header.Get("Content-Type"))
		require.Equal(t, float64(503), out["status"])
		require.NotEmpty(t, out["detail"])
	}
}

// Call sends a call with the operator token and decodes the answer.
func Call(t *testing.T, baseURL, method, path, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, baseURL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+OperatorToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, resp.Header, out
}

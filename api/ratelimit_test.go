package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/api"
	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/observability"
)

// rateLimitedAnswer is what a test reads of one answer.
type rateLimitedAnswer struct {
	status                   int
	retryAfter, policy, left string
	problemType              string
}

// getJobs sends GET /v1/jobs with token.
func getJobs(t *testing.T, s *apptest.System, token string) rateLimitedAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.API.URL+"/v1/jobs", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	a := rateLimitedAnswer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"),
		policy: resp.Header.Get("RateLimit-Policy"), left: resp.Header.Get("RateLimit")}
	if resp.StatusCode != http.StatusOK {
		var p struct {
			Type string `json:"type"`
		}
		require.NoError(t, json.Unmarshal(body, &p))
		a.problemType = p.Type
	}
	return a
}

// Under BUILDRISK_TOKEN_RATE_LIMIT=60, 90 quick GETs of one token meet 429
// with Retry-After, the IETF draft's RateLimit-Policy and RateLimit
// headers and a problem type of its own, counted by role, while another
// token, an operator's, is still served from its own budget.
func TestRateLimit_PerToken(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_TOKEN_RATE_LIMIT": "60"}})
	var served int
	var limited *rateLimitedAnswer
	for range 90 {
		a := getJobs(t, s, apptest.ViewerToken)
		switch a.status {
		case http.StatusOK:
			served++
			require.Equal(t, `"per-token";q=60;w=60`, a.policy)
		case http.StatusTooManyRequests:
			if limited == nil {
				limited = &a
			}
		default:
			t.Fatalf("unexpected status %d", a.status)
		}
	}
	require.NotNil(t, limited, "90 quick GETs of one token meet a 429")
	require.GreaterOrEqual(t, served, 60, "the minute's budget is served first")
	retryAfter, err := strconv.Atoi(limited.retryAfter)
	require.NoError(t, err, "Retry-After is delay-seconds")
	require.Positive(t, retryAfter)
	require.LessOrEqual(t, retryAfter, 60)
	require.Equal(t, string(api.ProblemRateLimited), limited.problemType)
	require.Equal(t, `"per-token";q=60;w=60`, limited.policy)
	require.Equal(t, `"per-token";r=0;t=`+limited.retryAfter, limited.left)

	other := getJobs(t, s, apptest.OperatorToken)
	require.Equal(t, http.StatusOK, other.status, "another token is served")
	require.Positive(t, s.Metric(observability.MetricRateLimited, map[string]string{"role": "viewer"}))
	require.Zero(t, s.Metric(observability.MetricRateLimited, map[string]string{"role": "operator"}))
}

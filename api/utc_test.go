package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/apptest"
)

// offsetDateTimeRE matches an RFC 3339 date-time with a numeric offset
// (+09:00, -05:00, +00:00): every date-time the api sends is UTC written
// with Z, because zod's default datetime() and other strict clients
// refuse an offset.
var offsetDateTimeRE = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?[+-]\d{2}:?\d{2}$`)

// offsetDateTimes returns the JSON paths of raw's strings that are date-times
// with an offset; raw that is not JSON has none.
func offsetDateTimes(raw []byte) []string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return nil
	}
	var found []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case string:
			if offsetDateTimeRE.MatchString(v) {
				found = append(found, path+"="+v)
			}
		case map[string]any:
			for k, e := range v {
				walk(path+"."+k, e)
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		}
	}
	walk("$", v)
	return found
}

// scheduledEnv turns on a schedule whose next due time the job list
// reports, in BUILDRISK_TIMEZONE's default zone (Asia/Seoul, +09:00): rules
// once a year, on 1 January at 06:00, with a catch-up window so short that
// no due time is ever enqueued while a test runs.
var scheduledEnv = map[string]string{
	"BUILDRISK_SCHEDULE_RULES":         "0 6 1 1 *",
	"BUILDRISK_SCHEDULE_CATCHUP_RULES": "1ms",
}

// Every date-time the README walk-through is answered with is UTC with Z,
// the schedule's next due time included (it was sent in the schedule's
// zone, +09:00, which hey-api's and orval's zod schemas refuse). The
// walk-through's calls, as the README makes them, against a live system.
func TestDateTimes_WalkthroughAnswersAreUTC(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: scheduledEnv})
	s.StartWorker()
	var offsets []string
	answered := 0
	call := func(method, path, key, body string, want int) map[string]any {
		t.Helper()
		req, err := http.NewRequest(method, s.API.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+apptest.OperatorToken)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, want, resp.StatusCode, "%s %s: %s", method, path, raw)
		answered++
		for _, o := range offsetDateTimes(raw) {
			offsets = append(offsets, method+" "+path+": "+o)
		}
		var out map[string]any
		_ = json.Unmarshal(raw, &out)
		return out
	}
	body := apptest.AptTradeBody([]string{"11110", "11140"}, "2025-01", "2025-03")

	created := call(http.MethodPost, "/v1/jobs/aptTrade/requests", "walkthrough-1", body, http.StatusAccepted)
	id := created["requestId"].(string)
	call(http.MethodPost, "/v1/jobs/aptTrade/requests", "walkthrough-1", body, http.StatusAccepted)
	call(http.MethodGet, "/v1/requests/"+id, "", "", http.StatusOK)
	apptest.WaitUntil(t, time.Minute, "request "+id+" to end", func() bool {
		status := call(http.MethodGet, "/v1/requests/"+id, "", "", http.StatusOK)["status"]
		return status == "DONE" || status == "FAILED"
	})
	jobs := call(http.MethodGet, "/v1/jobs", "", "", http.StatusOK)
	call(http.MethodGet, "/v1/jobs/rules", "", "", http.StatusOK)
	call(http.MethodGet, "/v1/requests?job=aptTrade&limit=10", "", "", http.StatusOK)
	call(http.MethodGet, "/v1/workers", "", "", http.StatusOK)
	call(http.MethodPost, "/v1/jobs/aptTrade/requests", "", apptest.AptTradeBody([]string{"1111"}, "2025-01", "2025-03"), http.StatusBadRequest)

	// Stop a run at its next chunk boundary, then resume it.
	year := apptest.AptTradeBody([]string{"11110", "11140"}, "2024-01", "2024-12")
	s.Gate.Arm(2)
	stopped := call(http.MethodPost, "/v1/jobs/aptTrade/requests", "", year, http.StatusAccepted)["requestId"].(string)
	<-s.Gate.Blocked
	call(http.MethodPost, "/v1/jobs/aptTrade/stop", "", "", http.StatusAccepted)
	s.Gate.Open()
	s.WaitRequest(stopped, "DONE", "FAILED")
	resumed := call(http.MethodPost, "/v1/jobs/aptTrade/requests", "", year, http.StatusAccepted)
	require.NotNil(t, resumed["resumesExecutionId"], "%v", resumed)
	s.WaitRequest(resumed["requestId"].(string), "DONE", "FAILED")
	call(http.MethodGet, "/v1/requests?outcome=STOPPED&cause=operator", "", "", http.StatusOK)
	call(http.MethodGet, "/v1/requests?outcome=STOPPED&endedOn=today", "", "", http.StatusOK)
	call(http.MethodGet, "/v1/providers", "", "", http.StatusOK)
	call(http.MethodGet, "/v1/coverage", "", "", http.StatusOK)
	call(http.MethodGet, "/v1/jobs/aptTrade/history", "", "", http.StatusOK)
	call(http.MethodGet, "/v1/audit", "", "", http.StatusOK)

	var next any
	for _, j := range jobs["jobs"].([]any) {
		if j := j.(map[string]any); j["name"] == "rules" {
			next = j["next"]
		}
	}
	require.NotNil(t, next, "the rules schedule's next due time is in the job list")
	t.Logf("%d answers, %d date-times with an offset", answered, len(offsets))
	require.Empty(t, offsets, "date-times with an offset (every answer is UTC, Z)")
}

// No example in the served documents (3.1 and the 3.0 copy) shows a
// date-time with an offset: a client's author copies what they show.
func TestDateTimes_DocumentExamplesAreUTC(t *testing.T) {
	t.Parallel()
	server := documentServer(t, nil)
	for _, path := range []string{"/openapi.json", "/openapi-3.0.json"} {
		rec := httptest.NewRecorder()
		server.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		require.Equal(t, http.StatusOK, rec.Code, path)
		require.Empty(t, offsetDateTimes(rec.Body.Bytes()), path)
	}
}

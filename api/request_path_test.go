package api_test

import (
	"net/http"
	"testing"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/radartype"
)

// The README's walk-through: 2 regions × 3 months → 6 calls, 6 chunks.
func TestRequestPath_Walkthrough(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	s.StartWorker()

	status, out := s.Post("/v1/jobs/aptTrade/requests", apptest.AptTradeBody([]string{"11110", "11140"}, "2025-01", "2025-03"))
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	require.Equal(t, float64(6), out["estimatedCalls"])
	require.Equal(t, "QUEUED", out["status"])
	require.Nil(t, out["resumesExecutionId"])

	done := s.WaitRequest(out["requestId"].(string), "DONE", "FAILED")
	require.Equal(t, "DONE", done["status"], "%v", done)
	require.NotEmpty(t, done["workerId"])
	require.NotNil(t, done["claimedAt"])
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM job_request r JOIN river_job j ON j.id = r.river_job_id
		WHERE r.id = $1::bigint AND r.claimed_at >= j.attempted_at AND r.worker_id = j.attempted_by[1]`, out["requestId"]),
		"claimed by the worker River handed its job to, when that worker started the run")
	exec := apptest.Execution(t, done)
	require.Equal(t, "COMPLETED", exec["status"])
	require.Equal(t, float64(6), exec["chunksDone"])
	require.Equal(t, float64(6), exec["chunksTotal"])
	require.Equal(t, float64(6), exec["externalCalls"])
	require.Equal(t, exec["itemsWritten"], exec["domainRows"], "counters and rows agree")
	require.Equal(t, int64(6), s.Fake.Stats().Total)
	require.Equal(t, int(exec["itemsWritten"].(float64)), s.Count("SELECT count(*) FROM apt_trade"))
}

// 50 concurrent POSTs for one job: exactly one 202, 49 × 409 with the same
// activeRequestId, decided by the database; after the run, a new POST is 202.
func TestRequestPath_ConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	body := apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-02")

	accepted := s.PostBurst(t, body, 50)
	require.Equal(t, 1, s.Count("SELECT count(*) FROM job_request"))
	require.Equal(t, 1, s.Count("SELECT count(*) FROM river_job"))

	s.StartWorker()
	s.WaitRequest(accepted, "DONE")
	again := s.RequestAptTrade(body)
	require.NotEqual(t, accepted, again)
}

// Bad input: a 400 naming the field (or 404), never a 500, and nothing
// written; its problem type tells a bad field from a request over the
// provider's daily cap.
func TestRequestPath_BadInput(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_DAILY_CAP_MOLIT": "10"}})

	cases := []struct {
		name, path, body string
		status           int
		location         string
	}{
		{"UnknownJob", "/v1/jobs/nope/requests", `{"params":{}}`, 404, ""},
		{"WrongRegion", "/v1/jobs/aptTrade/requests", apptest.AptTradeBody([]string{"11110", "1111"}, "2025-01", "2025-02"), 400, "body.params.regions[1]"},
		{"FromAfterTo", "/v1/jobs/aptTrade/requests", apptest.AptTradeBody([]string{"11110"}, "2025-05", "2025-02"), 400, "body.params.from"},
		{"BadMonth", "/v1/jobs/aptTrade/requests", apptest.AptTradeBody([]string{"11110"}, "2025-13", "2025-02"), 400, "body.params.from"},
		{"TooManyMonths", "/v1/jobs/aptTrade/requests", apptest.AptTradeBody([]string{"11110"}, "2010-01", "2020-02"), 400, "body.params.to"},
		{"UnknownParam", "/v1/jobs/aptTrade/requests", `{"params":{"regions":["11110"],"from":"2025-01","to":"2025-01","region":"x"}}`, 400, "body.params.region"},
		{"UnknownBodyField", "/v1/jobs/aptTrade/requests", `{"params":{"regions":["11110"],"from":"2025-01","to":"2025-01"},"max_calls":3}`, 400, "body.max_calls"},
		{"WrongType", "/v1/jobs/aptTrade/requests", `{"params":{"regions":"11110","from":"2025-01","to":"2025-01"}}`, 400, "body.params.regions"},
		{"WrongTypeMaxCalls", "/v1/jobs/aptTrade/requests", `{"params":{"regions":["11110"],"from":"2025-01","to":"2025-01"},"maxCalls":"ten"}`, 400, "body.maxCalls"},
		{"ZeroMaxCalls", "/v1/jobs/aptTrade/requests", `{"params":{"regions":["11110"],"from":"2025-01","to":"2025-01"},"maxCalls":0}`, 400, "body.maxCalls"},
		{"MissingParams", "/v1/jobs/aptTrade/requests", `{}`, 400, "body.params.regions"},
		{"EstimateOverDailyCap", "/v1/jobs/aptTrade/requests", apptest.AptTradeBody([]string{"11110", "11140"}, "2025-01", "2025-06"), 400, "body.params"},
		{"MalformedJSON", "/v1/jobs/aptTrade/requests", `{"params":{`, 400, "body"},
		{"NotAnObject", "/v1/jobs/aptTrade/requests", `[1,2]`, 400, "body"},
		{"TrailingData", "/v1/jobs/aptTrade/requests", `{"params":{}} {}`, 400, "body"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, out := s.Post(tc.path, tc.body)
			require.Equal(t, tc.status, status, "%v", out)
			require.NotEmpty(t, out["detail"])
			kind := map[int]string{400: "invalid-params", 404: "not-found"}[tc.status]
			if tc.name == "EstimateOverDailyCap" {
				kind = "cap-exceeded" // a kind of its own: split the request
			}
			require.Equal(t, "/problems/"+kind, out["type"], "%v", out)
			if tc.location != "" {
				errs, ok := out["errors"].([]any)
				require.True(t, ok, "%v", out)
				require.Equal(t, tc.location, errs[0].(map[string]any)["location"], "%v", out)
			}
		})
	}
	require.Equal(t, 0, s.Count("SELECT count(*) FROM job_request"))
	require.Equal(t, 0, s.Count("SELECT count(*) FROM river_job"))

	status, out := s.Get("/v1/requests?status=DONE2")
	require.Equal(t, 400, status, "%v", out)
	status, _ = s.Get("/v1/requests?limit=0")
	require.Equal(t, 400, status)
	status, _ = s.Get("/v1/requests?cursor=abc")
	require.Equal(t, 400, status)
	status, _ = s.Get("/v1/requests/12345")
	require.Equal(t, 404, status)
	status, _ = s.Get("/v1/requests/abc")
	require.Equal(t, 400, status, "a malformed id is a bad request, not an unknown one")
	status, _ = s.Get("/v1/jobs/nope")
	require.Equal(t, 404, status)
}

func TestRequestPath_Auth(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	body := apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01")

	status, _ := s.Do(http.MethodPost, "/v1/jobs/aptTrade/requests", "", body)
	require.Equal(t, http.StatusUnauthorized, status)
	status, _ = s.Do(http.MethodGet, "/v1/jobs", "wrong-token", "")
	require.Equal(t, http.StatusUnauthorized, status)
	status, _ = s.Do(http.MethodPost, "/v1/jobs/aptTrade/requests", apptest.ViewerToken, body)
	require.Equal(t, http.StatusForbidden, status)
	status, _ = s.Do(http.MethodGet, "/v1/jobs", apptest.ViewerToken, "")
	require.Equal(t, http.StatusOK, status)
	status, _ = s.Do(http.MethodGet, "/v1/requests", apptest.OperatorToken, "")
	require.Equal(t, http.StatusOK, status)
	for _, open := range []string{"/healthz", "/readyz", "/openapi.json"} {
		status, _ = s.Do(http.MethodGet, open, "", "")
		require.Equal(t, http.StatusOK, status, open)
	}
	require.Equal(t, 0, s.Count("SELECT count(*) FROM job_request"))
}

// GET /v1/requests pages newest first with an opaque cursor.
func TestRequestPath_ListPaging(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	for i := range 5 {
		status := radartype.RequestFailed
		if i%2 == 0 {
			status = radartype.RequestDone
		}
		testfactory.Request(t.Context(), t, s.Pool, &testfactory.RequestOpts{Job: "aptTrade", Status: status})
	}
	status, page1 := s.Get("/v1/requests?limit=2")
	require.Equal(t, 200, status)
	ids := func(page map[string]any) []string {
		var out []string
		for _, r := range page["requests"].([]any) {
			out = append(out, r.(map[string]any)["requestId"].(string))
		}
		return out
	}
	require.Equal(t, []string{"5", "4"}, ids(page1))
	_, page2 := s.Get("/v1/requests?limit=2&cursor=" + page1["nextCursor"].(string))
	require.Equal(t, []string{"3", "2"}, ids(page2))
	_, page3 := s.Get("/v1/requests?limit=2&cursor=" + page2["nextCursor"].(string))
	require.Equal(t, []string{"1"}, ids(page3))
	require.Nil(t, page3["nextCursor"])
	_, failed := s.Get("/v1/requests?status=FAILED&job=aptTrade")
	require.Equal(t, []string{"4", "2"}, ids(failed))
}

// Every job is in the OpenAPI document with its params schema and an example.
func TestRequestPath_OpenAPI(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	status, doc := s.Do(http.MethodGet, "/openapi.json", "", "")
	require.Equal(t, 200, status)
	paths := doc["paths"].(map[string]any)
	for _, name := range []string{"corpCodeSync", "filingParse", "stockPrice", "aptTrade", "creditEval", "metrics", "rules"} {
		post := paths["/v1/jobs/"+name+"/requests"].(map[string]any)["post"].(map[string]any)
		content := post["requestBody"].(map[string]any)["content"].(map[string]any)["application/json"].(map[string]any)
		require.NotNil(t, content["schema"], name)
		require.NotNil(t, content["example"], name)
	}
	for _, path := range []string{"/docs", "/openapi.yaml", "/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get(s.API.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, path)
	}
}

// Every refusal is counted: a request for a job the catalog does not hold
// (counted as job "other", so a caller cannot mint series) and a body that
// is not a request are buildrisk_requests_total{result="invalid"}, like
// params the job refuses.
func TestRequestPath_RefusalsBeforeTheEnqueuerAreCounted(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	invalid := func(job string) float64 {
		return s.Metric("buildrisk_requests_total", map[string]string{"job": job, "source": "api", "result": "invalid"})
	}
	status, _ := s.Post("/v1/jobs/noSuchJob/requests", `{"params":{}}`)
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, float64(1), invalid("other"))

	for _, body := range []string{`{"params":`, `[1,2]`, `{"params":{},"extra":1}`} {
		status, out := s.Post("/v1/jobs/aptTrade/requests", body)
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", body, out)
	}
	require.Equal(t, float64(3), invalid("aptTrade"))
	require.Zero(t, s.Count(`SELECT count(*) FROM job_request`))
}

// A run stopped by its maxCalls reads DONE as a request (the request was
// served), so the status filter cannot find it; the outcome filter can: by
// its execution's final status, and by the stop's cause. status=STOPPED
// stays a 400 (STOPPED is no request status) that points at outcome.
func TestRequestPath_OutcomeFilterListsAMaxCallsStop(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	s.StartWorker()
	stopped := s.RequestAptTrade(`{"params":{"regions":["11110"],"from":"2025-01","to":"2025-04"},"maxCalls":2}`)
	out := s.WaitRequest(stopped, "DONE", "FAILED")
	require.Equal(t, "DONE", out["status"], "%v", out)
	exec := apptest.Execution(t, out)
	require.Equal(t, "STOPPED", exec["status"], "%v", out)
	require.Equal(t, "max_calls", exec["stopCause"], "%v", out)
	completed := s.RequestAptTrade(apptest.AptTradeBody([]string{"11140"}, "2025-01", "2025-01"))
	s.WaitRequest(completed, "DONE")
	s.Gate.Arm(0) // the third run never ends: it has no outcome
	t.Cleanup(s.Gate.Open)
	queued := s.RequestAptTrade(apptest.AptTradeBody([]string{"11140"}, "2025-02", "2025-02"))

	ids := func(query string) []string {
		t.Helper()
		status, page := s.Get("/v1/requests" + query)
		require.Equal(t, http.StatusOK, status, "%s: %v", query, page)
		var got []string
		for _, r := range page["requests"].([]any) {
			got = append(got, r.(map[string]any)["requestId"].(string))
		}
		return got
	}
	require.Equal(t, []string{queued, completed, stopped}, ids(""))
	require.Equal(t, []string{completed, stopped}, ids("?status=DONE"), "both read DONE")
	require.Equal(t, []string{stopped}, ids("?outcome=STOPPED"))
	require.Equal(t, []string{stopped}, ids("?outcome=STOPPED&cause=max_calls&job=aptTrade&status=DONE"))
	require.Empty(t, ids("?outcome=STOPPED&cause=operator"))
	require.Equal(t, []string{completed}, ids("?outcome=COMPLETED"))
	require.Empty(t, ids("?outcome=FAILED"))
	require.Equal(t, []string{stopped}, ids("?outcome=STOPPED&limit=1"))

	for query, field := range map[string]string{
		"?status=STOPPED": "status", "?outcome=DONE": "outcome", "?outcome=STARTED": "outcome",
		"?outcome=STOPPED&cause=tired": "cause", "?cause=max_calls": "cause", // a cause needs its outcome
	} {
		status, out := s.Get("/v1/requests" + query)
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", query, out)
		require.Equal(t, "/problems/invalid-params", out["type"], query)
		require.Equal(t, "query."+field, out["errors"].([]any)[0].(map[string]any)["location"], query)
	}
	_, out = s.Get("/v1/requests?status=STOPPED")
	require.Contains(t, out["detail"], "outcome=STOPPED", "the refusal says where STOPPED is")
}

// Under a small daily cap a large creditEval runs with maxCalls: its whole
// plan over the cap of 300 is refused (400 cap-exceeded, the detail naming
// maxCalls as the way out), and with maxCalls 250 it is accepted,
// estimated at 250, which the estimate endpoint answers too.
func TestRequestPath_MaxCallsRunsUnderASmallCap(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_DAILY_CAP_CREDIT": "300"}})
	s.SeedExposure(400)
	status, out := s.Post("/v1/jobs/creditEval/requests", `{"params":{}}`)
	require.Equal(t, http.StatusBadRequest, status, "%v", out)
	require.Equal(t, "/problems/cap-exceeded", out["type"])
	require.Contains(t, out["detail"], "give maxCalls")

	status, out = s.Post("/v1/jobs/creditEval/estimate", `{"params":{},"maxCalls":250}`)
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.Equal(t, float64(250), out["estimatedCalls"])
	status, out = s.Post("/v1/jobs/creditEval/requests", `{"params":{},"maxCalls":250}`)
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	require.Equal(t, float64(250), out["estimatedCalls"])
}

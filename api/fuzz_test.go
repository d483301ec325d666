package api_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/buildrisk/radar/internal/apptest"
)

// fuzzCall sends one call to the system's API with the operator token and
// returns the status; inside a fuzz function only t may fail.
func fuzzCall(t *testing.T, s *apptest.System, method, path string, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(method, s.API.URL+path, strings.NewReader(string(body)))
	if err != nil {
		t.Skip("not an HTTP request line") // the client refuses it before the API sees it
	}
	req.Header.Set("Authorization", "Bearer "+apptest.OperatorToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// fuzzCount reads one count; inside a fuzz function only t may fail.
func fuzzCount(t *testing.T, s *apptest.System, query string) int {
	t.Helper()
	var n int
	if err := s.Pool.QueryRow(context.Background(), query).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Any POST body on any job's request endpoint: never a 5xx, and a refused
// request writes no row.
func FuzzAPI_RequestBody(f *testing.F) {
	s := apptest.New(f, nil)
	f.Add("aptTrade", []byte(`{"params":{"regions":["11110"],"from":"2025-01","to":"2025-02"},"maxCalls":5}`))
	f.Add("filingParse", []byte(`{"params":{"from":"2025-01-01","to":"2025-01-31","corpCodes":["00126380"]}}`))
	f.Add("creditEval", []byte(`{"params":{"backfill":true},"confirmPurge":true}`))
	f.Add("stockPrice", []byte(`{"params":{"date":"9999-12-31"},"maxCalls":2147483648}`))
	f.Add("metrics", []byte(`{"params":null,"x":1}`))
	f.Add("nosuchjob", []byte(`{`))
	f.Fuzz(func(t *testing.T, job string, body []byte) {
		before := fuzzCount(t, s, "SELECT count(*) FROM job_request")
		status := fuzzCall(t, s, http.MethodPost, "/v1/jobs/"+url.PathEscape(job)+"/requests", body)
		if status >= 500 {
			t.Fatalf("POST %q %q: %d", job, body, status)
		}
		after := fuzzCount(t, s, "SELECT count(*) FROM job_request")
		if status != http.StatusAccepted && after != before {
			t.Fatalf("POST %q %q: %d but %d rows written", job, body, status, after-before)
		}
	})
}

// Any list query and cursor: 200 or 400, never a 5xx.
func FuzzAPI_ListQuery(f *testing.F) {
	s := apptest.New(f, nil)
	s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	f.Add("aptTrade", "QUEUED", "1", "")
	f.Add("", "", "500", "1")
	f.Add("x", "done", "+1", "-1")
	f.Add("", "", "99999999999999999999", "0x10")
	f.Fuzz(func(t *testing.T, job, status, limit, cursor string) {
		q := url.Values{}
		for k, v := range map[string]string{"job": job, "status": status, "limit": limit, "cursor": cursor} {
			if v != "" {
				q.Set(k, v)
			}
		}
		got := fuzzCall(t, s, http.MethodGet, "/v1/requests?"+q.Encode(), nil)
		if got != http.StatusOK && got != http.StatusBadRequest {
			t.Fatalf("GET /v1/requests?%s: %d", q.Encode(), got)
		}
	})
}

// Any path id: never a 5xx; a malformed or unknown id changes nothing.
func FuzzAPI_PathID(f *testing.F) {
	s := apptest.New(f, nil)
	s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	for _, id := range []string{"1", "+1", "01", "0", "-1", "1e3", "9223372036854775808", " 1", "１"} {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		path := url.PathEscape(id)
		if got := fuzzCall(t, s, http.MethodGet, "/v1/requests/"+path, nil); got >= 500 {
			t.Fatalf("GET /v1/requests/%q: %d", id, got)
		}
		before := fuzzCount(t, s, "SELECT count(*) FROM job_execution WHERE status = 'ABANDONED'")
		got := fuzzCall(t, s, http.MethodPost, "/v1/executions/"+path+"/abandon", nil)
		if got >= 500 {
			t.Fatalf("POST /v1/executions/%q/abandon: %d", id, got)
		}
		if got != http.StatusOK && fuzzCount(t, s, "SELECT count(*) FROM job_execution WHERE status = 'ABANDONED'") != before {
			t.Fatalf("POST /v1/executions/%q/abandon: %d but an execution changed", id, got)
		}
	})
}

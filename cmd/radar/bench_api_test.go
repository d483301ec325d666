package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/queries/testfactory/bulk"
)

// benchJobList: GET /v1/jobs with ~100k executions in history against the
// same with ~1k.
func benchJobList(t *testing.T, scale benchScale) *benchRow {
	s := apptest.New(t, nil)
	rate := func() float64 {
		began := time.Now()
		for range scale.jobsGets {
			status, _ := s.Get("/v1/jobs")
			require.Equal(t, http.StatusOK, status)
		}
		return float64(scale.jobsGets) / time.Since(began).Seconds()
	}
	bulk.FinishedRuns(context.Background(), t, s.Pool, 1000)
	var small []float64
	for range scale.reps {
		small = append(small, rate())
	}
	bulk.FinishedRuns(context.Background(), t, s.Pool, scale.jobsBig-1000)
	row := &benchRow{name: fmt.Sprintf("GET /v1/jobs with %d executions in history", scale.jobsBig), unit: "req/s", refName: "same with 1,000", target: "≥ 0.5"}
	for i := range scale.reps {
		row.add(rate(), small[i])
	}
	return row
}

func formatRequestID(id int64) string { return strconv.FormatInt(id, 10) }

// benchAPIRate returns how many calls of do per second conc clients make
// together, n calls in all.
func benchAPIRate(t *testing.T, n, conc int, do func(client *http.Client) int, want int) float64 {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc}}
	defer client.CloseIdleConnections()
	var next, bad atomic.Int64
	var wg sync.WaitGroup
	began := time.Now()
	for range conc {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if do(client) != want {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(began)
	require.Zero(t, bad.Load(), "every call answered %d", want)
	return float64(n) / took.Seconds()
}

// benchAPICall sends one call to the api and returns its status, the body
// read and dropped.
func benchAPICall(t *testing.T, client *http.Client, method, url, token, body string) int {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// benchAPI: cheap api calls beside GET /healthz (the api's floor: routing,
// one handler, no database), each measured by 8 concurrent clients on
// kept-alive connections in the same repetition: POST of a duplicate
// request (409) while the job's request is active, and GET
// /v1/requests/{id} of a finished request with jobsBig executions in
// history.
func benchAPI(t *testing.T, scale benchScale) []*benchRow {
	s := apptest.New(t, nil)
	const conc = 8
	n := scale.jobsGets * 5
	status, out := s.Post("/v1/jobs/aptTrade/requests", `{"params":{"regions":["11110"],"from":"2025-01","to":"2025-01"}}`)
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	healthz := func(c *http.Client) int {
		return benchAPICall(t, c, http.MethodGet, s.API.URL+"/healthz", "", "")
	}
	duplicate := func(c *http.Client) int {
		return benchAPICall(t, c, http.MethodPost, s.API.URL+"/v1/jobs/aptTrade/requests", apptest.OperatorToken,
			`{"params":{"regions":["11110"],"from":"2025-01","to":"2025-01"}}`)
	}
	// A finished request with an execution, its instance holding chunks,
	// among jobsBig executions of history.
	bulk.FinishedRuns(context.Background(), t, s.Pool, scale.jobsBig)
	ctx := context.Background()
	run := testfactory.Execution(ctx, t, s.Pool, &testfactory.ExecutionOpts{Job: "stockPrice", ChunksTotal: 40, Targets: 400})
	for g := 1; g <= 40; g++ {
		testfactory.Checkpoint(ctx, t, s.Pool, run, &testfactory.CheckpointOpts{Chunk: fmt.Sprintf("c%d", g), Targets: 10, Written: 10})
	}
	testfactory.FinishExecution(ctx, t, s.Pool, run.ID, nil)
	requestID := run.RequestID
	getRequest := func(c *http.Client) int {
		return benchAPICall(t, c, http.MethodGet, s.API.URL+"/v1/requests/"+formatRequestID(requestID), apptest.ViewerToken, "")
	}
	dup := &benchRow{name: "POST of a duplicate request (409), 8 clients", unit: "req/s", refName: "GET /healthz", target: "—"}
	get := &benchRow{name: fmt.Sprintf("GET /v1/requests/{id} with %d executions in history, 8 clients", scale.jobsBig),
		unit: "req/s", refName: "GET /healthz", target: "≥ 0.25"}
	for range scale.reps {
		ref := benchAPIRate(t, n, conc, healthz, http.StatusOK)
		dup.add(benchAPIRate(t, n, conc, duplicate, http.StatusConflict), ref)
		get.add(benchAPIRate(t, n, conc, getRequest, http.StatusOK), ref)
	}
	return []*benchRow{dup, get}
}

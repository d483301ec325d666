package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/buildrisk/radar/api"
	"github.com/buildrisk/radar/internal/jobset"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/sql/pgtest"
)

// fakeRequests is the request owner as the api sees it (api.Requests),
// answering each enqueue with what the test set.
type fakeRequests struct {
	result *request.EnqueueResult
	err    error
	got    []*request.EnqueueParams
}

func (f *fakeRequests) Enqueue(_ context.Context, p *request.EnqueueParams) (*request.EnqueueResult, error) {
	f.got = append(f.got, p)
	return f.result, f.err
}

func (f *fakeRequests) Estimate(context.Context, queries.DBTX, *request.EnqueueParams) (*request.Estimate, error) {
	return nil, f.err
}

func (f *fakeRequests) Abandon(context.Context, pgx.Tx, *request.Abandonment) (bool, error) {
	return false, f.err
}

// The HTTP layer of POST /v1/jobs/{job}/requests, over a fake of the one
// interface the api needs of the request owner: what the owner answers is
// mapped to the contract's answers (202 with the request's figures, 409
// with the active request, 400 cap-exceeded naming the field, 503 with
// Retry-After for a database that cannot answer), and the owner is handed
// the call's source and caller. No River, worker or runner is built.
func TestRequestCreate_HTTPLayerOverAFakeOwner(t *testing.T) {
	t.Parallel()
	const token = "operator-token-0123456789abcdef0123456789"
	instruments, err := observability.NewInstruments(noop.NewMeterProvider())
	require.NoError(t, err)
	owner := &fakeRequests{}
	server, err := api.New(pgtest.NewPool(t), api.Config{
		Catalog: jobset.Catalog(), AlertRules: riskrule.Doc(), Requests: owner, Instruments: instruments, Version: "test",
		Tokens: map[string]api.Role{token: api.RoleOperator}, TokenNames: map[string]string{token: "ops"},
	})
	require.NoError(t, err)
	srv := httptest.NewServer(server.Handler())
	t.Cleanup(srv.Close)
	post := func(t *testing.T) (int, http.Header, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/jobs/aptTrade/requests",
			strings.NewReader(`{"params":{"regions":["11110"],"from":"2025-01","to":"2025-01"}}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var body map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return resp.StatusCode, resp.Header, body
	}

	t.Run("Accepted", func(t *testing.T) {
		executionID := int64(4)
		owner.result, owner.err = &request.EnqueueResult{
			Request: &queries.JobRequest{ID: 7, Job: "aptTrade", Status: "QUEUED"}, EstimatedCalls: 1, ResumesExecutionID: &executionID,
		}, nil
		status, _, body := post(t)
		require.Equal(t, http.StatusAccepted, status, "%v", body)
		require.Equal(t, map[string]any{"requestId": "7", "job": "aptTrade", "status": "QUEUED", "estimatedCalls": float64(1), "resumesExecutionId": "4"}, body)
		last := owner.got[len(owner.got)-1]
		require.Equal(t, "aptTrade", last.Job)
		require.Equal(t, "api", string(last.Source))
		require.Equal(t, "ops", last.RequestedBy, "the owner is told who asked, by token name")
	})
	t.Run("Duplicate", func(t *testing.T) {
		owner.result, owner.err = nil, &request.DuplicateError{Job: "aptTrade", ActiveRequestID: 5}
		status, _, body := post(t)
		require.Equal(t, http.StatusConflict, status)
		require.Equal(t, "/problems/duplicate-active-request", body["type"])
		require.Equal(t, "5", body["activeRequestId"])
	})
	t.Run("OverTheCap", func(t *testing.T) {
		owner.err = &request.OverCapError{Provider: "MOLIT", Cap: 10, Estimated: 12}
		status, _, body := post(t)
		require.Equal(t, http.StatusBadRequest, status)
		require.Equal(t, "/problems/cap-exceeded", body["type"])
		require.Contains(t, body["detail"], "params")
	})
	t.Run("DatabaseUnavailable", func(t *testing.T) {
		owner.err = syscall.ECONNREFUSED
		status, header, body := post(t)
		require.Equal(t, http.StatusServiceUnavailable, status, "%v", body)
		require.NotEmpty(t, header.Get("Retry-After"))
	})
}

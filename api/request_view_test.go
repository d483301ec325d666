package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtest"
)

// GET /v1/requests/{id} is one statement in one round trip (it was four):
// the request, its execution and its instance's figures (committed chunks
// and checkpoint parts, its executions and their calls) read together,
// with the values the four reads gave; a request without an execution has
// execution and instance null.
func TestRequestPath_GetRequestInOneStatement(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	ctx := context.Background()
	// An instance run twice: an older execution STOPPED after 4 calls, and
	// the request's running one, which committed chunks a and b (7 calls)
	// and a part of chunk c.
	live := testfactory.Worker(ctx, t, s.Pool, &testfactory.WorkerOpts{ID: "1@live#a"})
	instanceID := testfactory.Instance(ctx, t, s.Pool, &testfactory.InstanceOpts{Job: "aptTrade", ParamsHash: "h"}).ID
	requestID := testfactory.Request(ctx, t, s.Pool, &testfactory.RequestOpts{Job: "aptTrade", ParamsHash: "h", Status: radartype.RequestRunning, WorkerID: live.ID}).ID
	testfactory.Execution(ctx, t, s.Pool, &testfactory.ExecutionOpts{
		InstanceID: instanceID, RequestID: requestID, WorkerID: "old", Status: radartype.ExecutionStopped, ExternalCalls: 4, Unlinked: true, KeepRequest: true,
	})
	running := testfactory.Execution(ctx, t, s.Pool, &testfactory.ExecutionOpts{InstanceID: instanceID, RequestID: requestID, WorkerID: live.ID, ChunksTotal: 5})
	executionID := running.ID
	testfactory.Checkpoint(ctx, t, s.Pool, running, &testfactory.CheckpointOpts{Chunk: "a", Targets: 5, Written: 3, Skipped: 1, Failed: 1, ExternalCalls: 7})
	testfactory.Checkpoint(ctx, t, s.Pool, running, &testfactory.CheckpointOpts{Chunk: "b", Targets: 4, Written: 4})
	testfactory.CheckpointPart(ctx, t, s.Pool, running, "c", "x", "y")
	queuedID := testfactory.Request(ctx, t, s.Pool, &testfactory.RequestOpts{Job: "stockPrice", ParamsHash: "h"}).ID

	// The api again, on a traced pool: its statements are counted by name.
	tracer := &pgtest.RoundTripTracer{}
	traced := pgtest.NewTracedPool(t, s.APIPool, tracer)
	role := apptest.StartAPI(t, traced, s.Env, s.Tel)
	api := httptest.NewServer(role.Server().Handler())
	t.Cleanup(api.Close)
	read := func(id int64) (map[string]any, []string) {
		t.Helper()
		do := func() map[string]any {
			req, err := http.NewRequest(http.MethodGet, api.URL+"/v1/requests/"+strconv.FormatInt(id, 10), nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+apptest.ViewerToken)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
			var out map[string]any
			require.NoError(t, json.Unmarshal(raw, &out))
			return out
		}
		do() // the first call caches the statement's description
		tracer.Reset()
		out := do()
		var reads []string
		for _, trip := range tracer.Log() {
			for _, m := range regexp.MustCompile(`-- name: (Job\w+)`).FindAllStringSubmatch(trip, -1) {
				reads = append(reads, m[1])
			}
		}
		return out, reads
	}

	out, reads := read(requestID)
	require.Equal(t, []string{"JobRequestView"}, reads, "one statement")
	execution := out["execution"].(map[string]any)
	require.Equal(t, fmt.Sprint(executionID), execution["id"])
	require.Equal(t, "STARTED", execution["status"])
	require.Equal(t, float64(2), execution["chunksDone"])
	require.Equal(t, float64(5), execution["chunksTotal"])
	require.Equal(t, float64(9), execution["itemsWritten"])
	require.Equal(t, float64(7), execution["externalCalls"])
	instance := out["instance"].(map[string]any)
	require.Equal(t, fmt.Sprint(instanceID), instance["id"])
	require.Equal(t, float64(2), instance["executions"])
	require.Equal(t, float64(2), instance["chunksDone"])
	require.Equal(t, float64(5), instance["chunksPlanned"], "the most any of its executions planned")
	require.Equal(t, float64(3+4+2), instance["itemsWritten"], "chunks' written plus the parts' items")
	require.Equal(t, float64(1), instance["itemsSkipped"])
	require.Equal(t, float64(1), instance["itemsFailed"])
	require.Equal(t, float64(3+4+2+1+1), instance["targets"])
	require.Equal(t, float64(7+4), instance["externalCalls"])

	out, reads = read(queuedID)
	require.Equal(t, []string{"JobRequestView"}, reads)
	require.Equal(t, "QUEUED", out["status"])
	require.Nil(t, out["execution"])
	require.Nil(t, out["instance"])
}

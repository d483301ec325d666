package request

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/sql/pgtest"
)

// The restart rule has two homes: resumes, which the enqueue's client-side
// path and the automatic resume apply, and job_request_resumes, which the
// one-round-trip enqueue applies on the server (migration 00085). They must
// agree on every input: each execution status, equal and different params,
// a confirmPurge on either side, and an older resumable execution behind a
// newer one.
func TestResumes_ServerRuleAgreesWithTheClientRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	statuses := []string{ExecutionStarting, ExecutionStarted, ExecutionStopping, ExecutionStopped, ExecutionCompleted, ExecutionFailed, ExecutionAbandoned}
	cases := 0
	for _, status := range statuses {
		for _, olderStatus := range []string{"", ExecutionFailed} {
			for _, instancePurge := range []bool{false, true} {
				for _, requestHash := range []string{"h", "other"} {
					for _, requestPurge := range []bool{false, true} {
						job := fmt.Sprintf("rule%d", cases)
						cases++
						var instanceID, requestID int64
						require.NoError(t, pool.QueryRow(ctx, `INSERT INTO job_instance (job, params, params_hash, confirm_purge) VALUES ($1, '{}', 'h', $2) RETURNING id`, job, instancePurge).Scan(&instanceID))
						require.NoError(t, pool.QueryRow(ctx, `INSERT INTO job_request (job, params, params_hash, source, status) VALUES ($1, '{}', 'h', 'api', 'DONE') RETURNING id`, job).Scan(&requestID))
						var lastID int64
						for _, s := range []string{olderStatus, status} {
							if s == "" {
								continue
							}
							require.NoError(t, pool.QueryRow(ctx, `INSERT INTO job_execution (instance_id, job, request_id, status, worker_id) VALUES ($1, $2, $3, $4, 'w') RETURNING id`, instanceID, job, requestID, s).Scan(&lastID))
						}

						var server *int64
						require.NoError(t, pool.QueryRow(ctx, `SELECT job_request_resumes($1, $2, $3)`, job, requestHash, requestPurge).Scan(&server))
						client := !requestPurge && resumes(status, "h", instancePurge, requestHash)
						name := fmt.Sprintf("newest %s (older %q), instance purge %t, params %s, request purge %t", status, olderStatus, instancePurge, requestHash, requestPurge)
						if client {
							require.NotNil(t, server, name)
							require.Equal(t, lastID, *server, "%s: the newest execution resumes", name)
						} else {
							require.Nil(t, server, name)
						}
					}
				}
			}
		}
	}
	var none *int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT job_request_resumes('never-ran', 'h', false)`).Scan(&none))
	require.Nil(t, none, "a job without executions starts a new instance")
}

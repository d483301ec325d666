package request_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/radartype"
)

// The automatic resumes of one instance in a day are spaced by a doubling
// backoff, at most ten minutes, by the database's clock: the n-th resume
// request may start Backoff·2^(n-1) after the stop that inserted it.
func TestResume_BackoffDoublesPerAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newResumeBundle(t, request.ResumePolicy{Causes: []radartype.StopCause{radartype.CauseReap}, MaxPerDay: 4, Backoff: 3 * time.Minute})
	q := queries.New()
	req, execID := b.stopRun(t, false, radartype.ExecutionAbandoned)
	for attempt, want := range []time.Duration{3 * time.Minute, 6 * time.Minute, 10 * time.Minute, 10 * time.Minute} {
		id := b.resume(t, &request.Stopped{Request: req, ExecutionID: execID, Cause: radartype.CauseReap})
		require.NotZero(t, id, "attempt %d", attempt+1)
		wait, err := q.JobRequestWait(ctx, b.pool, id)
		require.NoError(t, err)
		require.InDelta(t, want.Seconds(), wait, 5, "attempt %d", attempt+1)

		// The resumed run dies too: its worker is reaped again.
		got, err := q.JobRequestGetByID(ctx, b.pool, id)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `UPDATE job_request SET status = 'FAILED' WHERE id = $1`, id)
		require.NoError(t, err)
		require.NoError(t, b.pool.QueryRow(ctx, `INSERT INTO job_execution (instance_id, job, request_id, status, worker_id, ended_at)
			SELECT instance_id, job, $1, 'ABANDONED', 'w', now() FROM job_execution WHERE id = $2 RETURNING id`, id, execID).Scan(&execID))
		req = got
	}
}

// Package requesttest checks, for tests, the invariant the request owner
// keeps: a request and the River job that delivers it never disagree
// about work still to do.
package requesttest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/queries"
)

// disagreements lists what breaks the invariant, one row per finding:
//
//   - a River job still live (available, pending, running, retryable,
//     scheduled) under an ended request: someone may run what is over. A
//     River job River was handing to a worker that died before the claim is
//     the one exception: River's public API can only mark it
//     (cancel_attempted_at), so it is accepted once marked and its worker
//     is gone;
//   - a QUEUED request whose River job is finalized or gone: nobody will
//     run it;
//   - a RUNNING request that no live execution holds: its execution is
//     over (or missing), or its worker has not beaten within the stale
//     window.
const disagreements = `
SELECT format('request %s is %s but its River job %s is %s', r.id, r.status, j.id, j.state)
FROM job_request r JOIN river_job j ON j.id = r.river_job_id
WHERE r.status IN ('DONE', 'FAILED')
  AND j.state IN ('available', 'pending', 'running', 'retryable', 'scheduled')
  AND NOT (j.state = 'running' AND j.metadata ? 'cancel_attempted_at'
           AND NOT EXISTS (SELECT 1 FROM worker w WHERE w.id = j.attempted_by[array_length(j.attempted_by, 1)]
                           AND w.heartbeat_at >= now() - make_interval(secs => $1)))
UNION ALL
SELECT format('request %s is QUEUED but its River job %s is %s', r.id, r.river_job_id, coalesce(j.state::text, 'gone'))
FROM job_request r LEFT JOIN river_job j ON j.id = r.river_job_id
WHERE r.status = 'QUEUED' AND r.river_job_id IS NOT NULL
  AND (j.id IS NULL OR j.state IN ('completed', 'cancelled', 'discarded'))
UNION ALL
SELECT format('request %s is RUNNING but no live execution holds it (execution %s %s, worker %s)',
              r.id, coalesce(e.id::text, 'none'), coalesce(e.status, '-'), coalesce(r.worker_id, '-'))
FROM job_request r
LEFT JOIN job_execution e ON e.id = r.execution_id
LEFT JOIN worker w ON w.id = r.worker_id
WHERE r.status = 'RUNNING'
  AND (e.id IS NULL OR e.status NOT IN ('STARTING', 'STARTED', 'STOPPING')
       OR w.id IS NULL OR w.heartbeat_at < now() - make_interval(secs => $1))
ORDER BY 1`

// Disagreements returns what breaks the invariant in db, judging workers
// live by staleAfter; none when the requests and their River jobs agree.
func Disagreements(ctx context.Context, db queries.DBTX, staleAfter time.Duration) ([]string, error) {
	rows, err := db.Query(ctx, disagreements, staleAfter.Seconds())
	if err != nil {
		return nil, fmt.Errorf("error checking requests against their River jobs: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("error checking requests against their River jobs: %w", err)
	}
	return found, nil
}

// RequireAgreement fails the test when a request and its River job
// disagree in db.
func RequireAgreement(t testing.TB, db queries.DBTX, staleAfter time.Duration) {
	t.Helper()
	found, err := Disagreements(context.Background(), db, staleAfter)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) > 0 {
		t.Fatalf("requests and River jobs disagree:\n  %s", strings.Join(found, "\n  "))
	}
}

package testfactory

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/buildrisk/radar/queries"
)

// Losses: rows gone behind the service's back, the way a failover to an
// asynchronous replica loses commits it had acknowledged, or the way a
// restore or a bug loses a job's output. No query of the service deletes
// these, so they are raw SQL. The functions a job calls from its chunks
// (on a goroutine that may not fail the test) return an error instead of
// taking a testing.TB.

// LoseChunkCommit undoes the commit of chunk of execution as a failover
// loses an acknowledged commit: the checkpoint is gone and the execution's
// figures are back where they were before it, in one statement.
func LoseChunkCommit(ctx context.Context, db queries.DBTX, executionID int64, chunk string) error {
	_, err := db.Exec(ctx, `
WITH gone AS (
    DELETE FROM job_checkpoint c USING job_execution e
    WHERE e.id = $1 AND c.instance_id = e.instance_id AND c.chunk = $2
    RETURNING c.written, c.skipped, c.failed, c.external_calls
)
UPDATE job_execution e
SET chunks_done = e.chunks_done - 1,
    items_written = e.items_written - gone.written,
    items_skipped = e.items_skipped - gone.skipped,
    items_failed = e.items_failed - gone.failed,
    external_calls = e.external_calls - gone.external_calls
FROM gone WHERE e.id = $1`, executionID, chunk)
	if err != nil {
		return fmt.Errorf("testfactory: losing the commit of chunk %s: %w", chunk, err)
	}
	return nil
}

// LosePart undoes one part commit of chunk (its first by item) as a
// failover loses it: the part is gone and its execution's written count is
// back. It returns the part's items, whose domain rows the caller loses
// too.
func LosePart(ctx context.Context, db queries.DBTX, chunk string) ([]string, error) {
	var items []string
	err := db.QueryRow(ctx, `
WITH part AS (
    DELETE FROM job_checkpoint_part
    WHERE ctid = (SELECT ctid FROM job_checkpoint_part WHERE chunk = $1 ORDER BY items[1] LIMIT 1)
    RETURNING execution_id, items
), figures AS (
    UPDATE job_execution e SET items_written = e.items_written - cardinality(part.items)
    FROM part WHERE e.id = part.execution_id
)
SELECT items FROM part`, chunk).Scan(&items)
	if err != nil {
		return nil, fmt.Errorf("testfactory: losing a part of chunk %s: %w", chunk, err)
	}
	return items, nil
}

// LoseExecution deletes an execution and its checkpoints, as a failover
// loses an execution started just before it.
func LoseExecution(ctx context.Context, db queries.DBTX, executionID int64) error {
	_, err := db.Exec(ctx, `
WITH checkpoints AS (DELETE FROM job_checkpoint WHERE execution_id = $1)
DELETE FROM job_execution WHERE id = $1`, executionID)
	if err != nil {
		return fmt.Errorf("testfactory: losing execution %d: %w", executionID, err)
	}
	return nil
}

// LoseWrittenItems takes n written items off an execution's figures while
// every checkpoint stays: a loss the plan check cannot see.
func LoseWrittenItems(ctx context.Context, db queries.DBTX, executionID, n int64) error {
	if _, err := db.Exec(ctx, `UPDATE job_execution SET items_written = items_written - $2 WHERE id = $1`, executionID, n); err != nil {
		return fmt.Errorf("testfactory: losing written items of execution %d: %w", executionID, err)
	}
	return nil
}

// LoseCreditGrades deletes the grades of corpCodes (of day only, unless
// day is zero) and returns how many were deleted.
func LoseCreditGrades(ctx context.Context, tb testing.TB, db queries.DBTX, day time.Time, corpCodes []string) int64 {
	tb.Helper()
	tag, err := db.Exec(ctx, `DELETE FROM credit_grade WHERE corp_code = ANY($1) AND ($2::date IS NULL OR eval_date = $2)`, corpCodes, nullDate(day))
	must(tb, err, "losing grades")
	return tag.RowsAffected()
}

// LoseRiskMetrics deletes the metrics of day of corpCodes, and the rule
// checks of those metrics, and returns how many metrics were deleted.
func LoseRiskMetrics(ctx context.Context, tb testing.TB, db queries.DBTX, day time.Time, corpCodes []string) int64 {
	tb.Helper()
	var n int64
	must(tb, db.QueryRow(ctx, `
WITH checks AS (DELETE FROM risk_rule_check WHERE alert_date = $1 AND corp_code = ANY($2)),
metrics AS (DELETE FROM risk_metric WHERE metric_date = $1 AND corp_code = ANY($2) RETURNING 1)
SELECT count(*) FROM metrics`, day, corpCodes).Scan(&n), "losing metrics")
	return n
}

// LoseStockPrices deletes the prices of day of shortCodes and returns how
// many were deleted.
func LoseStockPrices(ctx context.Context, tb testing.TB, db queries.DBTX, day time.Time, shortCodes []string) int64 {
	tb.Helper()
	tag, err := db.Exec(ctx, `DELETE FROM stock_price WHERE trade_date = $1 AND short_code = ANY($2)`, day, shortCodes)
	must(tb, err, "losing prices")
	return tag.RowsAffected()
}

// ClearExposure empties the exposure ledger.
func ClearExposure(ctx context.Context, tb testing.TB, db queries.DBTX) {
	tb.Helper()
	_, err := db.Exec(ctx, `DELETE FROM exposure`)
	must(tb, err, "clearing exposure")
}

func nullDate(day time.Time) *time.Time {
	if day.IsZero() {
		return nil
	}
	return &day
}

// ReissueLease hands the day's one open call lease to holder with nothing
// claimed, as a failover to an asynchronous replica leaves it when it lost
// the lease and the sequence drew its id anew for another holder's lease.
// It returns the lease's id and granted calls.
func ReissueLease(ctx context.Context, tb testing.TB, db queries.DBTX, holder string) (id int64, granted int32) {
	tb.Helper()
	must(tb, db.QueryRow(ctx, `UPDATE provider_call_lease SET holder = $1, claimed = 0 RETURNING id, granted`, holder).Scan(&id, &granted),
		"reissuing the lease")
	return id, granted
}

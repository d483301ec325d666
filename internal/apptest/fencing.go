package apptest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/sql/pgtx"
)

// Within waits for ch, failing the test after d.
func Within(t *testing.T, d time.Duration, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
}

// AbandonRequest does to a request what the reaper does to a dead worker's.
func (s *System) AbandonRequest(id any, msg string) {
	s.T.Helper()
	ctx := context.Background()
	require.NoError(s.T, pgtx.InTx(ctx, s.Pool, func(tx pgx.Tx) error {
		var requestID int64
		var executionID *int64
		if err := tx.QueryRow(ctx, `SELECT id, execution_id FROM job_request WHERE id = $1::bigint`, id).Scan(&requestID, &executionID); err != nil {
			return err
		}
		ok, err := s.Role.Owner().Abandon(ctx, tx, &request.Abandonment{RequestID: requestID, ExecutionID: executionID, Message: msg})
		require.True(s.T, ok, "request %v was not active", id)
		return err
	}))
}

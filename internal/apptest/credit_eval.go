package apptest

import (
	"context"
	"net/http"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/exposure"
	"github.com/buildrisk/radar/upstream"
)

// SeedCreditTargets seeds the exposure ledger the way `radar dev` does and
// returns the targets (companies with exposure > 0), in corp code order.
func (s *System) SeedCreditTargets() []string {
	s.T.Helper()
	n, err := exposure.Seed(context.Background(), s.Pool, s.Fake.Companies())
	require.NoError(s.T, err)
	require.Positive(s.T, n)
	rows, err := s.Pool.Query(context.Background(), `SELECT corp_code FROM exposure WHERE outstanding_krw > 0 ORDER BY corp_code`)
	require.NoError(s.T, err)
	defer rows.Close()
	var targets []string
	for rows.Next() {
		var code string
		require.NoError(s.T, rows.Scan(&code))
		targets = append(targets, code)
	}
	require.NoError(s.T, rows.Err())
	return targets
}

// RequestCreditEval posts a creditEval request and returns its answer.
func (s *System) RequestCreditEval(params string) map[string]any {
	s.T.Helper()
	status, out := s.Post("/v1/jobs/creditEval/requests", `{"params":`+params+`}`)
	require.Equal(s.T, http.StatusAccepted, status, "%v", out)
	return out
}

// CreditToday is the evaluation day of the in-process system right now.
func (s *System) CreditToday() time.Time {
	return upstream.Day(time.Now(), s.Env.Location)
}

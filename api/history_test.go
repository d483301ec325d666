package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/jobs/riskmetric"
	"github.com/buildrisk/radar/queries/testfactory"
)

// GET /v1/jobs/{job}/history: per day of the database's clock in
// BUILDRISK_TIMEZONE, the newest execution's status, else missed, else
// none, and the day's coverage against today's targets.
func TestJobHistory_OutcomesAndCoveragePerDay(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	ctx := context.Background()
	tz := s.Env.Location.String()
	// Four targets (outstanding > 0) and one company that repaid.
	testfactory.Exposure(ctx, t, s.Pool, map[string]int64{"00000001": 1, "00000002": 1, "00000003": 1, "00000004": 1, "00000005": 0})
	// The database's today in BUILDRISK_TIMEZONE.
	var dbToday time.Time
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT (clock_timestamp() AT TIME ZONE $1)::date`, tz).Scan(&dbToday))
	grade := func(daysAgo int, codes ...string) {
		for _, code := range codes {
			testfactory.CreditGrade(ctx, t, s.Pool, &testfactory.CreditGradeOpts{CorpCode: code, EvalDate: dbToday.AddDate(0, 0, -daysAgo), ExecutionID: 1})
		}
	}
	grade(0, "00000001", "00000002", "00000003", "00000004")
	grade(1, "00000001", "00000002", "00000005") // the repaid company's grade is not a target's
	grade(3, "00000001", "00000002", "00000003")
	s.SeedHistory(credit.Name, 0, "FAILED", "COMPLETED") // the newest wins
	s.SeedHistory(credit.Name, 1, "FAILED")
	s.SeedMissed(credit.Name, 2)
	s.SeedHistory(credit.Name, 3, "STOPPED")
	s.SeedMissed(credit.Name, 3) // an execution that started wins over a missed due time
	s.SeedHistory(credit.Name, 4, "ABANDONED")
	s.SeedHistory(riskmetric.Name, 5, "COMPLETED") // another job's
	s.SeedHistory(riskmetric.Name, 0, "STARTED")
	var today string
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT ((clock_timestamp() AT TIME ZONE $1)::date)::text`, tz).Scan(&today))

	status, out := s.Get("/v1/jobs/creditEval/history")
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.Equal(t, credit.Name, out["job"])
	days := out["days"].([]any)
	require.Len(t, days, 14, "14 days by default")
	require.Equal(t, today, days[0].(map[string]any)["day"], "newest first, from the database's today")
	want := []struct {
		outcome string
		current float64
	}{{"completed", 4}, {"failed", 2}, {"missed", 0}, {"stopped", 3}, {"abandoned", 0}, {"none", 0}}
	for i, w := range want {
		d := days[i].(map[string]any)
		require.Equal(t, w.outcome, d["outcome"], "day %d: %v", i, d)
		require.Equal(t, float64(4), d["targets"], "day %d: today's targets: %v", i, d)
		require.Equal(t, w.current, d["current"], "day %d: %v", i, d)
		require.InDelta(t, w.current*100/4, d["percent"], 0.001, "day %d: %v", i, d)
	}
	for _, d := range days[6:] {
		require.Equal(t, "none", d.(map[string]any)["outcome"])
	}

	// days is honoured; a job without coverage has outcomes and no %.
	status, out = s.Get("/v1/jobs/metrics/history?days=6")
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.Len(t, out["days"], 6)
	require.Equal(t, "completed", out["days"].([]any)[5].(map[string]any)["outcome"])
	require.Equal(t, "running", out["days"].([]any)[0].(map[string]any)["outcome"], "an active execution is running")

	// stockPrice's data dates are weekdays: a weekend day has no %.
	status, out = s.Get("/v1/jobs/stockPrice/history?days=7")
	require.Equal(t, http.StatusOK, status, "%v", out)
	for _, d := range out["days"].([]any) {
		d := d.(map[string]any)
		day, err := time.Parse(time.DateOnly, d["day"].(string))
		require.NoError(t, err)
		if day.Weekday() == time.Saturday || day.Weekday() == time.Sunday {
			require.Nil(t, d["percent"], "%v", d)
		} else {
			require.Equal(t, float64(100), d["percent"], "no listed company: nothing missing: %v", d)
		}
	}
	status, out = s.Get("/v1/jobs/corpCodeSync/history?days=31")
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.Len(t, out["days"], 31)
	d := out["days"].([]any)[0].(map[string]any)
	require.Nil(t, d["percent"], "%v", d)
	require.Nil(t, d["targets"], "%v", d)

	for _, bad := range []string{"0", "32", "x"} {
		status, out = s.Get("/v1/jobs/creditEval/history?days=" + bad)
		require.Equal(t, http.StatusBadRequest, status, "%v", out)
		require.Contains(t, out["detail"], "days", "the 400 names the field")
	}
	status, out = s.Get("/v1/jobs/nope/history")
	require.Equal(t, http.StatusNotFound, status, "%v", out)
}

package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs/apttrade"
	"github.com/buildrisk/radar/jobs/corpcode"
	"github.com/buildrisk/radar/jobs/filing"
	"github.com/buildrisk/radar/jobs/riskmetric"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/jobs/stockprice"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// The whole day's pipeline for a fixed seed: corpCodeSync → stockPrice over
// the 20 trading days before the date → filingParse → aptTrade → metrics,
// which chains to rules; then every alert of the date is recomputed by hand
// from the stored rows (SQL and Go of this test, not the jobs' code) and the
// set of alerts must be exactly the hand-computed one. Re-running rules for
// the date replaces its alerts.
func TestRadar_MetricsAndRulesPipeline(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Fake: fakeupstream.Config{Seed: 7, Companies: 200}})
	s.StartRadarWorker()
	ctx := context.Background()

	s.RunJob(corpcode.Name, `{}`)
	_, err := seedCompanyRegions(ctx, s.Pool, s.Fake.Companies())
	require.NoError(t, err)

	// The date: the last weekday of a listed construction company's drop.
	var dropper fakeupstream.Company
	for _, c := range s.Fake.Companies() {
		if c.Construction && c.StockCode != "" && !c.DropStart.IsZero() {
			dropper = c
			break
		}
	}
	require.NotEmpty(t, dropper.CorpCode, "the fake always has a drop")
	day := dropper.DropStart.AddDate(0, 0, fakeupstream.DropDays-1)
	for apptest.IsWeekend(day) {
		day = day.AddDate(0, 0, -1)
	}
	date := day.Format(time.DateOnly)

	// Prices of 22 weekdays up to the date (20 trading days even with a
	// holiday or two in between): the date through the API, the days before
	// by the stockPrice job's own code run in this process (a request each
	// would only add River's pick-up latency 21 times).
	var weekdays []time.Time
	for d := day.AddDate(0, 0, -1); len(weekdays) < 21; d = d.AddDate(0, 0, -1) {
		if !apptest.IsWeekend(d) {
			weekdays = append(weekdays, d)
		}
	}
	for _, d := range weekdays {
		s.ProcessJob(stockprice.Job{}, stockprice.Name, fmt.Sprintf(`{"date":%q}`, d.Format(time.DateOnly)))
	}
	s.RunJob(stockprice.Name, fmt.Sprintf(`{"params":{"date":%q}}`, date))
	require.GreaterOrEqual(t, s.Count(`SELECT count(DISTINCT trade_date) FROM stock_price`), 20)
	s.RunJob(filing.Name, fmt.Sprintf(`{"params":{"from":%q,"to":%q}}`, day.AddDate(0, 0, -(riskmetric.RiskFilingDays-1)).Format(time.DateOnly), date))
	var regions []string
	for _, c := range s.Fake.Companies() {
		if c.Construction {
			regions = append(regions, c.MainRegions...)
		}
	}
	slices.Sort(regions)
	regions = slices.Compact(regions)
	s.RunJob(apttrade.Name, apptest.AptTradeBody(regions, day.AddDate(0, -6, 0).Format("2006-01"), day.Format("2006-01")))

	// Credit grades, as creditEval stores them (one row per evaluation day).
	var tracked []string
	require.NoError(t, apptest.PgxCollect(ctx, s, `SELECT corp_code FROM company WHERE tracked ORDER BY corp_code`, nil, func(scan func(...any) error) error {
		var c string
		err := scan(&c)
		tracked = append(tracked, c)
		return err
	}))
	// The dropping company is also downgraded: two signals, COMPOUND.
	downgraded, mildly := dropper.CorpCode, tracked[0]
	if mildly == downgraded {
		mildly = tracked[1]
	}
	for _, g := range []struct {
		corp  string
		daysB int
		grade string
	}{
		{downgraded, 120, "A"}, {downgraded, 60, "A"}, {downgraded, 3, "BBB"}, // 3 notches in the window
		{mildly, 30, "AA"}, {mildly, 1, "AA-"}, // first evaluated inside the window: 1 notch
	} {
		testfactory.CreditGrade(ctx, t, s.Pool, &testfactory.CreditGradeOpts{CorpCode: g.corp, EvalDate: day.AddDate(0, 0, -g.daysB), Grade: g.grade})
	}

	// metrics, chained to rules in the transaction that records it.
	_, metricsDone := s.RunJob(riskmetric.Name, fmt.Sprintf(`{"params":{"date":%q}}`, date))
	require.Equal(t, float64(len(tracked)), apptest.Execution(t, metricsDone)["itemsWritten"])
	var rulesID int64
	var rulesParams, rulesSource string
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT id, params::text, source FROM job_request WHERE job = 'rules'`).Scan(&rulesID, &rulesParams, &rulesSource))
	require.Equal(t, "chain", rulesSource)
	require.JSONEq(t, fmt.Sprintf(`{"date":%q}`, date), rulesParams)
	rulesDone := s.WaitRequest(fmt.Sprint(rulesID), "DONE", "FAILED")
	require.Equal(t, "COMPLETED", apptest.Execution(t, rulesDone)["status"], "%v", rulesDone)

	// The alerts as the API lists them.
	status, out := s.Get("/v1/alerts?date=" + date)
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.Equal(t, date, out["date"])
	got := map[string]map[string]any{} // "corp/rule" → values
	for _, a := range out["alerts"].([]any) {
		alert := a.(map[string]any)
		require.Equal(t, date, alert["date"])
		got[alert["corpCode"].(string)+"/"+alert["rule"].(string)] = alert["values"].(map[string]any)
	}

	// The alerts by hand.
	want := apptest.HandAlerts(t, s, day, tracked)
	t.Logf("%s: %d alerts over %d tracked companies: %v", date, len(want), len(tracked), apptest.SortedKeys(want))
	require.Equal(t, apptest.SortedKeys(want), apptest.SortedKeys(got), "exactly the hand-computed alerts")
	require.Contains(t, want, dropper.CorpCode+"/"+riskrule.PriceDrawdown, "the drop is found")
	require.Contains(t, want, downgraded+"/"+riskrule.GradeDowngrade)
	require.Contains(t, want, downgraded+"/"+riskrule.Compound)
	require.NotContains(t, want, mildly+"/"+riskrule.GradeDowngrade)
	hasFilingAlert := false
	for key, w := range want {
		g := got[key]
		for name, v := range w {
			switch v := v.(type) {
			case float64:
				require.InDelta(t, v, g[name], 1e-9, "%s %s", key, name)
			default:
				require.Equal(t, v, g[name], "%s %s", key, name)
			}
		}
		hasFilingAlert = hasFilingAlert || strings.HasSuffix(key, "/"+riskrule.RiskFilings)
	}
	require.True(t, hasFilingAlert, "a distressed company's risk filings are found")
	require.Equal(t, 3.0, got[downgraded+"/"+riskrule.GradeDowngrade]["gradeChangeNotches"])

	// Re-running the date replaces its alerts: same set, new rows.
	before := s.Count(`SELECT max(id) FROM risk_alert`)
	s.RunJob(riskrule.Name, fmt.Sprintf(`{"params":{"date":%q}}`, date))
	require.Equal(t, len(want), s.Count(`SELECT count(*) FROM risk_alert WHERE alert_date = $1`, day))
	require.Zero(t, s.Count(`SELECT count(*) FROM risk_alert WHERE id <= $1`, before), "the old alerts were replaced")
	// rules' coverage marker: every company with metrics on the date was
	// checked, whether or not a rule fired for it.
	withMetrics := s.Count(`SELECT count(*) FROM risk_metric WHERE metric_date = $1`, day)
	require.Positive(t, withMetrics)
	require.Equal(t, withMetrics, s.Count(`SELECT count(*) FROM risk_rule_check WHERE alert_date = $1`, day))

	// onlyMissing: 3 companies' metrics (and their rule checks) lost;
	// metrics computes exactly those and the rules run it chains to checks
	// exactly those, with the same params.
	rows, err := s.Pool.Query(ctx, `SELECT corp_code FROM risk_metric WHERE metric_date = $1 ORDER BY corp_code LIMIT 3`, day)
	require.NoError(t, err)
	lost, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, lost, 3)
	require.Equal(t, int64(3), testfactory.LoseRiskMetrics(ctx, t, s.Pool, day, lost))
	onlyMissing := fmt.Sprintf(`{"date":%q,"onlyMissing":true}`, date)
	_, metricsDone = s.RunJob(riskmetric.Name, `{"params":`+onlyMissing+`}`)
	require.Equal(t, float64(3), apptest.Execution(t, metricsDone)["chunksTotal"])
	require.Equal(t, withMetrics, s.Count(`SELECT count(*) FROM risk_metric WHERE metric_date = $1`, day))
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT id, params::text FROM job_request WHERE job = 'rules' ORDER BY id DESC LIMIT 1`).Scan(&rulesID, &rulesParams))
	require.JSONEq(t, onlyMissing, rulesParams)
	rulesDone = s.WaitRequest(fmt.Sprint(rulesID), "DONE", "FAILED")
	require.Equal(t, "COMPLETED", apptest.Execution(t, rulesDone)["status"], "%v", rulesDone)
	require.Equal(t, float64(3), apptest.Execution(t, rulesDone)["chunksTotal"])
	require.Equal(t, withMetrics, s.Count(`SELECT count(*) FROM risk_rule_check WHERE alert_date = $1`, day))

	// Filters and bad queries.
	status, one := s.Get("/v1/alerts?date=" + date + "&company=" + dropper.CorpCode)
	require.Equal(t, http.StatusOK, status)
	for _, a := range one["alerts"].([]any) {
		require.Equal(t, dropper.CorpCode, a.(map[string]any)["corpCode"])
		require.Equal(t, dropper.Name, a.(map[string]any)["companyName"])
	}
	require.NotEmpty(t, one["alerts"])
	status, latest := s.Get("/v1/alerts")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, date, latest["date"], "default: the newest date with alerts")
	status, none := s.Get("/v1/alerts?date=2000-01-03")
	require.Equal(t, http.StatusOK, status)
	require.Empty(t, none["alerts"])
	status, bad := s.Get("/v1/alerts?date=2025-13-01")
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "query.date", bad["errors"].([]any)[0].(map[string]any)["location"])
	status, bad = s.Get("/v1/alerts?company=123")
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "query.company", bad["errors"].([]any)[0].(map[string]any)["location"])
	status, _ = s.Do(http.MethodGet, "/v1/alerts", "", "")
	require.Equal(t, http.StatusUnauthorized, status)
}

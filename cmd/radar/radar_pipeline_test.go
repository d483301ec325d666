package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/jobs"
	"github.com/buildrisk/radar/jobs/filing"
	"github.com/buildrisk/radar/jobs/stockprice"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/upstream"
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
	s := newTestSystem(t, &testSystemOpts{fake: fakeupstream.Config{Seed: 7, Companies: 200}})
	s.startRadarWorker()
	ctx := context.Background()

	s.runJob(jobs.CorpCodeSync, `{}`)
	_, err := seedCompanyRegions(ctx, s.pool, s.fake.Companies())
	require.NoError(t, err)

	// The date: the last weekday of a listed construction company's drop.
	var dropper fakeupstream.Company
	for _, c := range s.fake.Companies() {
		if c.Construction && c.StockCode != "" && !c.DropStart.IsZero() {
			dropper = c
			break
		}
	}
	require.NotEmpty(t, dropper.CorpCode, "the fake always has a drop")
	day := dropper.DropStart.AddDate(0, 0, fakeupstream.DropDays-1)
	for isWeekend(day) {
		day = day.AddDate(0, 0, -1)
	}
	date := day.Format(time.DateOnly)

	// Prices of 22 weekdays up to the date (20 trading days even with a
	// holiday or two in between): the date through the API, the days before
	// by the stockPrice job's own code run in this process (a request each
	// would only add River's pick-up latency 21 times).
	var weekdays []time.Time
	for d := day.AddDate(0, 0, -1); len(weekdays) < 21; d = d.AddDate(0, 0, -1) {
		if !isWeekend(d) {
			weekdays = append(weekdays, d)
		}
	}
	for _, d := range weekdays {
		s.processJob(stockprice.Job{}, jobs.StockPrice, fmt.Sprintf(`{"date":%q}`, d.Format(time.DateOnly)))
	}
	s.runJob(jobs.StockPrice, fmt.Sprintf(`{"params":{"date":%q}}`, date))
	require.GreaterOrEqual(t, s.count(`SELECT count(DISTINCT trade_date) FROM stock_price`), 20)
	s.runJob(jobs.FilingParse, fmt.Sprintf(`{"params":{"from":%q,"to":%q}}`, day.AddDate(0, 0, -(jobs.MetricsRiskFilingDays-1)).Format(time.DateOnly), date))
	var regions []string
	for _, c := range s.fake.Companies() {
		if c.Construction {
			regions = append(regions, c.MainRegions...)
		}
	}
	slices.Sort(regions)
	regions = slices.Compact(regions)
	s.runJob(jobs.AptTrade, aptTradeBody(regions, day.AddDate(0, -6, 0).Format("2006-01"), day.Format("2006-01")))

	// Credit grades, as creditEval stores them (one row per evaluation day).
	var tracked []string
	require.NoError(t, pgxCollect(ctx, s, `SELECT corp_code FROM company WHERE tracked ORDER BY corp_code`, nil, func(scan func(...any) error) error {
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
		_, err := s.pool.Exec(ctx, `INSERT INTO credit_grade (corp_code, eval_date, grade, source, execution_id) VALUES ($1, $2, $3, 'lookup', 0)`,
			g.corp, day.AddDate(0, 0, -g.daysB), g.grade)
		require.NoError(t, err)
	}

	// metrics, chained to rules in the transaction that records it.
	_, metricsDone := s.runJob(jobs.Metrics, fmt.Sprintf(`{"params":{"date":%q}}`, date))
	require.Equal(t, float64(len(tracked)), execution(t, metricsDone)["itemsWritten"])
	var rulesID int64
	var rulesParams, rulesSource string
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT id, params::text, source FROM job_request WHERE job = 'rules'`).Scan(&rulesID, &rulesParams, &rulesSource))
	require.Equal(t, "chain", rulesSource)
	require.JSONEq(t, fmt.Sprintf(`{"date":%q}`, date), rulesParams)
	rulesDone := s.waitRequest(fmt.Sprint(rulesID), "DONE", "FAILED")
	require.Equal(t, "COMPLETED", execution(t, rulesDone)["status"], "%v", rulesDone)

	// The alerts as the API lists them.
	status, out := s.get("/v1/alerts?date=" + date)
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.Equal(t, date, out["date"])
	got := map[string]map[string]any{} // "corp/rule" → values
	for _, a := range out["alerts"].([]any) {
		alert := a.(map[string]any)
		require.Equal(t, date, alert["date"])
		got[alert["corpCode"].(string)+"/"+alert["rule"].(string)] = alert["values"].(map[string]any)
	}

	// The alerts by hand.
	want := handAlerts(t, s, day, tracked)
	t.Logf("%s: %d alerts over %d tracked companies: %v", date, len(want), len(tracked), sortedKeys(want))
	require.Equal(t, sortedKeys(want), sortedKeys(got), "exactly the hand-computed alerts")
	require.Contains(t, want, dropper.CorpCode+"/"+jobs.RulePriceDrawdown, "the drop is found")
	require.Contains(t, want, downgraded+"/"+jobs.RuleGradeDowngrade)
	require.Contains(t, want, downgraded+"/"+jobs.RuleCompound)
	require.NotContains(t, want, mildly+"/"+jobs.RuleGradeDowngrade)
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
		hasFilingAlert = hasFilingAlert || strings.HasSuffix(key, "/"+jobs.RuleRiskFilings)
	}
	require.True(t, hasFilingAlert, "a distressed company's risk filings are found")
	require.Equal(t, 3.0, got[downgraded+"/"+jobs.RuleGradeDowngrade]["gradeChangeNotches"])

	// Re-running the date replaces its alerts: same set, new rows.
	before := s.count(`SELECT max(id) FROM risk_alert`)
	s.runJob(jobs.Rules, fmt.Sprintf(`{"params":{"date":%q}}`, date))
	require.Equal(t, len(want), s.count(`SELECT count(*) FROM risk_alert WHERE alert_date = $1`, day))
	require.Zero(t, s.count(`SELECT count(*) FROM risk_alert WHERE id <= $1`, before), "the old alerts were replaced")
	// rules' coverage marker: every company with metrics on the date was
	// checked, whether or not a rule fired for it.
	withMetrics := s.count(`SELECT count(*) FROM risk_metric WHERE metric_date = $1`, day)
	require.Positive(t, withMetrics)
	require.Equal(t, withMetrics, s.count(`SELECT count(*) FROM risk_rule_check WHERE alert_date = $1`, day))

	// onlyMissing: 3 companies' metrics (and their rule checks) lost;
	// metrics computes exactly those and the rules run it chains to checks
	// exactly those, with the same params.
	rows, err := s.pool.Query(ctx, `SELECT corp_code FROM risk_metric WHERE metric_date = $1 ORDER BY corp_code LIMIT 3`, day)
	require.NoError(t, err)
	lost, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, lost, 3)
	_, err = s.pool.Exec(ctx, `DELETE FROM risk_metric WHERE metric_date = $1 AND corp_code = ANY($2)`, day, lost)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, `DELETE FROM risk_rule_check WHERE alert_date = $1 AND corp_code = ANY($2)`, day, lost)
	require.NoError(t, err)
	onlyMissing := fmt.Sprintf(`{"date":%q,"onlyMissing":true}`, date)
	_, metricsDone = s.runJob(jobs.Metrics, `{"params":`+onlyMissing+`}`)
	require.Equal(t, float64(3), execution(t, metricsDone)["chunksTotal"])
	require.Equal(t, withMetrics, s.count(`SELECT count(*) FROM risk_metric WHERE metric_date = $1`, day))
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT id, params::text FROM job_request WHERE job = 'rules' ORDER BY id DESC LIMIT 1`).Scan(&rulesID, &rulesParams))
	require.JSONEq(t, onlyMissing, rulesParams)
	rulesDone = s.waitRequest(fmt.Sprint(rulesID), "DONE", "FAILED")
	require.Equal(t, "COMPLETED", execution(t, rulesDone)["status"], "%v", rulesDone)
	require.Equal(t, float64(3), execution(t, rulesDone)["chunksTotal"])
	require.Equal(t, withMetrics, s.count(`SELECT count(*) FROM risk_rule_check WHERE alert_date = $1`, day))

	// Filters and bad queries.
	status, one := s.get("/v1/alerts?date=" + date + "&company=" + dropper.CorpCode)
	require.Equal(t, http.StatusOK, status)
	for _, a := range one["alerts"].([]any) {
		require.Equal(t, dropper.CorpCode, a.(map[string]any)["corpCode"])
		require.Equal(t, dropper.Name, a.(map[string]any)["companyName"])
	}
	require.NotEmpty(t, one["alerts"])
	status, latest := s.get("/v1/alerts")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, date, latest["date"], "default: the newest date with alerts")
	status, none := s.get("/v1/alerts?date=2000-01-03")
	require.Equal(t, http.StatusOK, status)
	require.Empty(t, none["alerts"])
	status, bad := s.get("/v1/alerts?date=2025-13-01")
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "query.date", bad["errors"].([]any)[0].(map[string]any)["location"])
	status, bad = s.get("/v1/alerts?company=123")
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "query.company", bad["errors"].([]any)[0].(map[string]any)["location"])
	status, _ = s.do(http.MethodGet, "/v1/alerts", "", "")
	require.Equal(t, http.StatusUnauthorized, status)
}

// handAlerts computes the date's alerts from the stored rows with this
// test's own SQL and Go, and the default thresholds.
func handAlerts(t *testing.T, s *testSystem, day time.Time, tracked []string) map[string]map[string]any {
	t.Helper()
	ctx := context.Background()
	want := map[string]map[string]any{}
	fired := map[string][]string{}
	add := func(corp, rule string, values map[string]any) {
		values["threshold"] = jobs.RuleThresholdDefaults()[rule]
		want[corp+"/"+rule] = values
		fired[corp] = append(fired[corp], rule)
	}
	for _, corp := range tracked {
		// Drawdown: the newest close against the highest of the last 20.
		var closes []float64
		var newest time.Time
		require.NoError(t, pgxCollect(ctx, s, `SELECT trade_date, close FROM stock_price WHERE corp_code = $1 AND trade_date <= $2 ORDER BY trade_date DESC LIMIT 20`,
			[]any{corp, day}, func(scan func(...any) error) error {
				var d time.Time
				var c int64
				err := scan(&d, &c)
				if len(closes) == 0 {
					newest = d
				}
				closes = append(closes, float64(c))
				return err
			}))
		if len(closes) > 0 && !newest.Before(day.AddDate(0, 0, -10)) {
			if dd := closes[0]/slices.Max(closes) - 1; dd <= -jobs.RulePriceDrawdownDefault {
				add(corp, jobs.RulePriceDrawdown, map[string]any{"drawdown20d": dd})
			}
		}

		// Risk filings: the titles of the last 90 days through the rules.
		risky := 0.0
		require.NoError(t, pgxCollect(ctx, s, `SELECT report_nm FROM filing WHERE corp_code = $1 AND rcept_dt > $2::date - 90 AND rcept_dt <= $2`,
			[]any{corp, day}, func(scan func(...any) error) error {
				var name string
				err := scan(&name)
				if risk, _ := filing.Classify(name); risk {
					risky++
				}
				return err
			}))
		if risky >= jobs.RuleRiskFilingsDefault {
			add(corp, jobs.RuleRiskFilings, map[string]any{"riskFilings90d": risky})
		}

		// Grades: the latest against the one in force 90 days before.
		var grades []struct {
			d time.Time
			g string
		}
		require.NoError(t, pgxCollect(ctx, s, `SELECT eval_date, grade FROM credit_grade WHERE corp_code = $1 AND eval_date <= $2 ORDER BY eval_date`,
			[]any{corp, day}, func(scan func(...any) error) error {
				var r struct {
					d time.Time
					g string
				}
				err := scan(&r.d, &r.g)
				grades = append(grades, r)
				return err
			}))
		if len(grades) >= 2 {
			base := grades[0]
			for _, g := range grades {
				if !g.d.After(day.AddDate(0, 0, -90)) {
					base = g
				}
			}
			latest := grades[len(grades)-1]
			if notches := upstream.GradeRank(latest.g) - upstream.GradeRank(base.g); latest.d.After(base.d) && float64(notches) >= jobs.RuleGradeDowngradeDefault {
				add(corp, jobs.RuleGradeDowngrade, map[string]any{"gradeChangeNotches": float64(notches)})
			}
		}

		// Apartments in the company's regions: trades and median price per
		// m², the last 3 months against the 3 before.
		type window struct {
			n      int
			prices []float64
		}
		var recent, previous window
		recentFrom, previousFrom := day.AddDate(0, -3, 1), day.AddDate(0, -6, 1)
		require.NoError(t, pgxCollect(ctx, s, `SELECT t.deal_date, t.deal_amount_krw::float8, t.area_m2::float8 FROM apt_trade t
			JOIN company_region r ON r.region = t.region WHERE r.corp_code = $1`, []any{corp}, func(scan func(...any) error) error {
			var d time.Time
			var amount, area float64
			if err := scan(&d, &amount, &area); err != nil {
				return err
			}
			switch {
			case !d.Before(recentFrom) && !d.After(day):
				recent.n++
				recent.prices = append(recent.prices, amount/area)
			case !d.Before(previousFrom) && d.Before(recentFrom):
				previous.n++
				previous.prices = append(previous.prices, amount/area)
			}
			return nil
		}))
		if previous.n > 0 {
			if v := float64(recent.n)/float64(previous.n) - 1; v <= -jobs.RuleAptVolumeDropDefault {
				add(corp, jobs.RuleAptVolumeDrop, map[string]any{"aptVolumeChange": v})
			}
			if recent.n > 0 {
				if v := median(recent.prices)/median(previous.prices) - 1; v <= -jobs.RuleAptPriceDropDefault {
					add(corp, jobs.RuleAptPriceDrop, map[string]any{"aptPriceChange": v})
				}
			}
		}

		// Compound: independent signals (the two apartment rules are one).
		signals := map[string]bool{}
		for _, r := range fired[corp] {
			if r == jobs.RuleAptPriceDrop {
				r = jobs.RuleAptVolumeDrop
			}
			signals[r] = true
		}
		if float64(len(signals)) >= jobs.RuleCompoundDefault {
			rules := make([]any, len(fired[corp]))
			for i, r := range fired[corp] {
				rules[i] = r
			}
			add(corp, jobs.RuleCompound, map[string]any{"rules": rules, "signals": float64(len(signals))})
		}
	}
	return want
}

// processJob runs every chunk of job in this process, outside the worker
// and without job records (execution id 0): the job's own Plan, Process
// and Write against the fake upstream.
func (s *testSystem) processJob(job batch.Job, name, params string) {
	s.t.Helper()
	ctx := context.Background()
	up, err := app.NewUpstream(s.pool, s.env, s.tel, "processJob")
	require.NoError(s.t, err)
	run := &batch.Run{
		Job: name, Params: json.RawMessage(params), Calls: up.NewCaller(name, 0), DB: s.pool,
		Logger: s.tel.Logger, FanOut: batch.FanOutDefault, Instruments: s.tel.Instruments,
	}
	plan, err := job.Plan(ctx, run)
	require.NoError(s.t, err)
	for _, chunk := range plan.Chunks {
		res, err := job.Process(ctx, run, chunk)
		require.NoError(s.t, err)
		require.Equal(s.t, res.Targets, res.Written+res.Skipped+res.Failed)
		if res.Write != nil {
			require.NoError(s.t, queries.InTx(ctx, s.pool, func(tx pgx.Tx) error { return res.Write(ctx, tx) }))
		}
	}
	require.NoError(s.t, run.Calls.Release(ctx))
	if ender, ok := job.(batch.RunEnder); ok {
		ender.EndRun(run)
	}
}

func pgxCollect(ctx context.Context, s *testSystem, sql string, args []any, each func(scan func(...any) error) error) error {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

func median(v []float64) float64 {
	sorted := slices.Clone(v)
	sort.Float64s(sorted)
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

func isWeekend(d time.Time) bool { return d.Weekday() == time.Saturday || d.Weekday() == time.Sunday }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

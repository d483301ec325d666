package apptest

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/jobs/filing"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/sql/pgtx"
	"github.com/buildrisk/radar/upstream"
)

// HandAlerts computes the date's alerts from the stored rows with this
// test's own SQL and Go, and the default thresholds.
func HandAlerts(t *testing.T, s *System, day time.Time, tracked []string) map[string]map[string]any {
	t.Helper()
	ctx := context.Background()
	want := map[string]map[string]any{}
	fired := map[string][]string{}
	add := func(corp, rule string, values map[string]any) {
		values["threshold"] = riskrule.ThresholdDefaults()[rule]
		want[corp+"/"+rule] = values
		fired[corp] = append(fired[corp], rule)
	}
	for _, corp := range tracked {
		// Drawdown: the newest close against the highest of the last 20.
		var closes []float64
		var newest time.Time
		require.NoError(t, PgxCollect(ctx, s, `SELECT trade_date, close FROM stock_price WHERE corp_code = $1 AND trade_date <= $2 ORDER BY trade_date DESC LIMIT 20`,
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
			if dd := closes[0]/slices.Max(closes) - 1; dd <= -riskrule.PriceDrawdownDefault {
				add(corp, riskrule.PriceDrawdown, map[string]any{"drawdown20d": dd})
			}
		}

		// Risk filings: the titles of the last 90 days through the rules.
		risky := 0.0
		require.NoError(t, PgxCollect(ctx, s, `SELECT report_nm FROM filing WHERE corp_code = $1 AND rcept_dt > $2::date - 90 AND rcept_dt <= $2`,
			[]any{corp, day}, func(scan func(...any) error) error {
				var name string
				err := scan(&name)
				if risk, _ := filing.Classify(name); risk {
					risky++
				}
				return err
			}))
		if risky >= riskrule.RiskFilingsDefault {
			add(corp, riskrule.RiskFilings, map[string]any{"riskFilings90d": risky})
		}

		// Grades: the latest against the one in force 90 days before.
		var grades []struct {
			d time.Time
			g string
		}
		require.NoError(t, PgxCollect(ctx, s, `SELECT eval_date, grade FROM credit_grade WHERE corp_code = $1 AND eval_date <= $2 ORDER BY eval_date`,
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
			if notches := upstream.GradeRank(latest.g) - upstream.GradeRank(base.g); latest.d.After(base.d) && float64(notches) >= riskrule.GradeDowngradeDefault {
				add(corp, riskrule.GradeDowngrade, map[string]any{"gradeChangeNotches": float64(notches)})
			}
		}

		handAptSignals(t, s, corp, day, add)

		// Compound: independent signals (the two apartment rules are one).
		signals := map[string]bool{}
		for _, r := range fired[corp] {
			if r == riskrule.AptPriceDrop {
				r = riskrule.AptVolumeDrop
			}
			signals[r] = true
		}
		if float64(len(signals)) >= riskrule.CompoundDefault {
			rules := make([]any, len(fired[corp]))
			for i, r := range fired[corp] {
				rules[i] = r
			}
			add(corp, riskrule.Compound, map[string]any{"rules": rules, "signals": float64(len(signals))})
		}
	}
	return want
}

// handAptSignals adds corp's apartment alerts, computed by hand: trades
// and median price per m² in the company's regions, the last 3 months
// against the 3 before.
func handAptSignals(t *testing.T, s *System, corp string, day time.Time, add func(corp, rule string, values map[string]any)) {
	t.Helper()
	ctx := context.Background()
	type window struct {
		n      int
		prices []float64
	}
	var recent, previous window
	recentFrom, previousFrom := day.AddDate(0, -3, 1), day.AddDate(0, -6, 1)
	require.NoError(t, PgxCollect(ctx, s, `SELECT t.deal_date, t.deal_amount_krw::float8, t.area_m2::float8 FROM apt_trade t
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
		if v := float64(recent.n)/float64(previous.n) - 1; v <= -riskrule.AptVolumeDropDefault {
			add(corp, riskrule.AptVolumeDrop, map[string]any{"aptVolumeChange": v})
		}
		if recent.n > 0 {
			if v := Median(recent.prices)/Median(previous.prices) - 1; v <= -riskrule.AptPriceDropDefault {
				add(corp, riskrule.AptPriceDrop, map[string]any{"aptPriceChange": v})
			}
		}
	}
}

// ProcessJob runs every chunk of job in this process, outside the worker
// and without job records (execution id 0): the job's own Plan, Process
// and Write against the fake upstream.
func (s *System) ProcessJob(job batch.Job, name, params string) {
	s.T.Helper()
	ctx := context.Background()
	up, err := app.NewUpstream(s.Pool, s.Env, s.Tel, "processJob")
	require.NoError(s.T, err)
	run := &batch.Run{
		DB: batch.NewReader(s.Pool), Job: name, Params: json.RawMessage(params), Calls: up.NewCaller(name, 0),
		Logger: s.Tel.Logger, FanOut: batch.FanOutDefault, Instruments: s.Tel.Instruments,
	}
	plan, err := job.Plan(ctx, run)
	require.NoError(s.T, err)
	for _, chunk := range plan.Chunks {
		res, err := job.Process(ctx, run, chunk)
		require.NoError(s.T, err)
		require.Equal(s.T, res.Targets, res.Written+res.Skipped+res.Failed)
		if res.Write != nil {
			require.NoError(s.T, pgtx.InTx(ctx, s.Pool, func(tx pgx.Tx) error { return res.Write(ctx, tx) }))
		}
	}
	require.NoError(s.T, run.Calls.Release(ctx))
	if ender, ok := job.(batch.RunEnder); ok {
		ender.EndRun(run)
	}
}

func PgxCollect(ctx context.Context, s *System, sql string, args []any, each func(scan func(...any) error) error) error {
	rows, err := s.Pool.Query(ctx, sql, args...)
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

func Median(v []float64) float64 {
	sorted := slices.Clone(v)
	sort.Float64s(sorted)
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

func IsWeekend(d time.Time) bool { return d.Weekday() == time.Saturday || d.Weekday() == time.Sunday }

func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs/corpcode"
	"github.com/buildrisk/radar/jobs/filing"
	"github.com/buildrisk/radar/jobs/riskmetric"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/jobs/stockprice"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// filingParse: one chunk per tracked company (estimate = tracked companies,
// or corpCodes), filings stored once, risk-relevant ones flagged with the
// reason of the documented rules.
func TestRadar_FilingParse(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Fake: fakeupstream.Config{Companies: 300}})
	s.StartRadarWorker()

	status, out := s.Post("/v1/jobs/filingParse/requests", `{"params":{"from":"2025-01-01","to":"2025-06-30"}}`)
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	require.Equal(t, float64(0), out["estimatedCalls"], "no tracked companies yet")
	failed := s.WaitRequest(out["requestId"].(string), "DONE", "FAILED")
	require.Equal(t, "FAILED", failed["status"])
	require.Contains(t, apptest.Execution(t, failed)["exitMessage"], filing.ErrNoCompanies.Error())

	s.RunJob(corpcode.Name, `{}`)
	tracked, _ := apptest.FakeCounts(s)
	body := `{"params":{"from":"2025-01-01","to":"2025-12-31"}}`
	accepted, done := s.RunJob(filing.Name, body)
	require.Equal(t, float64(tracked), accepted["estimatedCalls"], "one page per tracked company")
	exec := apptest.Execution(t, done)
	require.Equal(t, float64(tracked), exec["chunksTotal"])
	require.Equal(t, float64(tracked), exec["externalCalls"], "every company's filings fit one page")
	require.Len(t, s.CallsPerKey(fakeupstream.EndpointFilingList), tracked)
	stored := s.Count(`SELECT count(*) FROM filing`)
	require.Positive(t, stored)
	require.Equal(t, float64(stored), exec["itemsWritten"])
	require.Equal(t, float64(stored), exec["domainRows"])
	require.Zero(t, s.Count(`SELECT count(*) FROM filing f WHERE NOT EXISTS (SELECT 1 FROM company c WHERE c.corp_code = f.corp_code AND c.tracked)`))

	// Flags: recomputed from the titles with the documented rules.
	rows, err := s.Pool.Query(context.Background(), `SELECT report_nm, risk_flag, risk_reason FROM filing`)
	require.NoError(t, err)
	flagged := 0
	for rows.Next() {
		var name, reason string
		var risk bool
		require.NoError(t, rows.Scan(&name, &risk, &reason))
		wantRisk, wantReason := filing.Classify(name)
		require.Equal(t, wantRisk, risk, name)
		require.Equal(t, wantReason, reason, name)
		if risk {
			flagged++
		}
	}
	require.NoError(t, rows.Err())
	require.Positive(t, flagged, "the fake's distressed companies file risk reports")
	distressed := map[string]bool{}
	for _, c := range s.Fake.Companies() {
		distressed[c.CorpCode] = c.Distressed
	}
	risky, err := s.Pool.Query(context.Background(), `SELECT DISTINCT corp_code FROM filing WHERE risk_flag`)
	require.NoError(t, err)
	for risky.Next() {
		var code string
		require.NoError(t, risky.Scan(&code))
		require.True(t, distressed[code], "only distressed companies file risk reports: %s", code)
	}
	require.NoError(t, risky.Err())

	// Again: a new instance, the same rows.
	s.RunJob(filing.Name, body)
	require.Equal(t, stored, s.Count(`SELECT count(*) FROM filing`), "idempotent")

	// Explicit corpCodes: estimate and chunks follow them.
	var some []string
	for _, c := range s.Fake.Companies()[:3] {
		some = append(some, `"`+c.CorpCode+`"`)
	}
	accepted, done = s.RunJob(filing.Name, `{"params":{"from":"2025-01-01","to":"2025-01-31","corpCodes":[`+strings.Join(some, ",")+`]}}`)
	require.Equal(t, float64(3), accepted["estimatedCalls"])
	require.Equal(t, float64(3), apptest.Execution(t, done)["chunksTotal"])

	status, out = s.Post("/v1/jobs/filingParse/requests", `{"params":{"from":"2024-01-01","to":"2025-01-01"}}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, out["detail"], "params.to")
}

// stockPrice: chunks of 100 listed tracked companies, one call each; a
// weekend calls nothing and a holiday skips every company, neither fails.
func TestRadar_StockPrice(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Fake: fakeupstream.Config{Companies: 1500}})
	s.StartRadarWorker()
	s.RunJob(corpcode.Name, `{}`)
	_, listed := apptest.FakeCounts(s)
	require.Greater(t, listed, 100, "more than one chunk")
	chunks := float64((listed + 99) / 100)

	accepted, done := s.RunJob(stockprice.Name, `{"params":{"date":"2025-03-14"}}`)
	require.Equal(t, float64(listed), accepted["estimatedCalls"])
	exec := apptest.Execution(t, done)
	require.Equal(t, chunks, exec["chunksTotal"])
	require.Equal(t, float64(listed), exec["externalCalls"])
	require.Equal(t, float64(listed), exec["itemsWritten"])
	require.Equal(t, float64(listed), exec["domainRows"])
	require.Equal(t, listed, s.Count(`SELECT count(*) FROM stock_price WHERE trade_date = '2025-03-14'`))
	require.Zero(t, s.Count(`SELECT count(*) FROM stock_price p JOIN company c USING (corp_code) WHERE c.stock_code <> p.short_code OR NOT c.tracked`))
	require.Zero(t, s.Count(`SELECT count(*) FROM stock_price WHERE close <= 0 OR high < low OR market_cap <= 0`))

	// Saturday: nothing called, every company skipped, COMPLETED.
	accepted, done = s.RunJob(stockprice.Name, `{"params":{"date":"2025-03-15"}}`)
	require.Equal(t, float64(0), accepted["estimatedCalls"])
	exec = apptest.Execution(t, done)
	require.Equal(t, float64(0), exec["externalCalls"])
	require.Equal(t, float64(listed), exec["itemsSkipped"])
	require.Equal(t, float64(0), exec["itemsFailed"])
	require.Contains(t, exec["exitMessage"], fmt.Sprintf("skipped %d (weekend: %d)", listed, listed), "skipped items carry their reason")

	// Children's Day, a Monday: KRX answers no items; skipped, not failed.
	_, done = s.RunJob(stockprice.Name, `{"params":{"date":"2025-05-05"}}`)
	exec = apptest.Execution(t, done)
	require.Equal(t, float64(listed), exec["externalCalls"])
	require.Equal(t, float64(listed), exec["itemsSkipped"])
	require.Equal(t, float64(0), exec["itemsWritten"])
	require.Contains(t, exec["exitMessage"], "no price for the day (holiday or not traded)")
	require.Zero(t, s.Count(`SELECT count(*) FROM stock_price WHERE trade_date IN ('2025-03-15', '2025-05-05')`))

	// The same day again: idempotent.
	s.RunJob(stockprice.Name, `{"params":{"date":"2025-03-14"}}`)
	require.Equal(t, listed, s.Count(`SELECT count(*) FROM stock_price`))

	// onlyMissing: 5 prices lost, in the first and the last chunk; the estimate and
	// the calls are exactly those 5.
	rows, err := s.Pool.Query(context.Background(), `SELECT short_code FROM stock_price WHERE trade_date = '2025-03-14' ORDER BY short_code`)
	require.NoError(t, err)
	priced, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	lost := append(append([]string{}, priced[3:5]...), priced[listed-3:listed]...) // in the first and the last chunk
	require.Equal(t, int64(5), testfactory.LoseStockPrices(context.Background(), t, s.Pool, time.Date(2025, 3, 14, 0, 0, 0, 0, time.UTC), lost))
	before := s.Fake.Stats().Total
	accepted, done = s.RunJob(stockprice.Name, `{"params":{"date":"2025-03-14","onlyMissing":true}}`)
	require.Equal(t, float64(5), accepted["estimatedCalls"])
	exec = apptest.Execution(t, done)
	require.Equal(t, float64(5), exec["externalCalls"])
	require.Equal(t, float64(5), exec["itemsWritten"])
	require.Equal(t, int64(5), s.Fake.Stats().Total-before)
	require.Equal(t, listed, s.Count(`SELECT count(*) FROM stock_price WHERE trade_date = '2025-03-14'`))

	status, out := s.Post("/v1/jobs/stockPrice/requests", `{"params":{}}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, out["detail"], "params.date")
}

// Jobs that read what corpCodeSync or metrics write fail, with a message
// saying what to run, instead of succeeding with nothing done.
func TestRadar_NothingToDoFails(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	s.StartRadarWorker()
	for _, tc := range []struct{ job, body, message string }{
		{stockprice.Name, `{"params":{"date":"2025-03-14"}}`, stockprice.ErrNoCompanies.Error()},
		{riskmetric.Name, `{"params":{"date":"2025-03-14"}}`, riskmetric.ErrNoCompanies.Error()},
		{riskrule.Name, `{"params":{"date":"2025-03-14"}}`, riskrule.ErrNoMetrics.Error()},
	} {
		out := s.WaitRequest(s.RequestJob(tc.job, tc.body)["requestId"].(string), "DONE", "FAILED")
		require.Equal(t, "FAILED", out["status"], tc.job)
		require.Contains(t, apptest.Execution(t, out)["exitMessage"], tc.message, tc.job)
	}
	require.Zero(t, s.Count(`SELECT count(*) FROM job_request WHERE job = 'rules' AND source = 'chain'`), "a failed metrics run does not chain")
}

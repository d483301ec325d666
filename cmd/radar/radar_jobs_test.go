package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/jobs"
	"github.com/buildrisk/radar/jobs/corpcode"
	"github.com/buildrisk/radar/jobs/filing"
	"github.com/buildrisk/radar/jobs/riskmetric"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/jobs/stockprice"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// requestJob posts a request for job and returns the 202's body.
func (s *testSystem) requestJob(job, body string) map[string]any {
	s.t.Helper()
	status, out := s.post("/v1/jobs/"+job+"/requests", body)
	require.Equal(s.t, http.StatusAccepted, status, "%s: %v", job, out)
	return out
}

// runJob requests job, waits for it to end and requires it COMPLETED; it
// returns the 202's body and the finished request.
func (s *testSystem) runJob(job, body string) (accepted, done map[string]any) {
	s.t.Helper()
	accepted = s.requestJob(job, body)
	done = s.waitRequest(accepted["requestId"].(string), "DONE", "FAILED")
	exec, ok := done["execution"].(map[string]any)
	require.True(s.t, ok, "%s: no execution: %v", job, done)
	require.Equal(s.t, "COMPLETED", exec["status"], "%s: %v", job, done)
	return accepted, done
}

// startRadarWorker starts a worker whose corpCodeSync downloads into the
// test's temporary directory (nothing left behind in the system's).
func (s *testSystem) startRadarWorker() {
	s.t.Helper()
	dir := s.t.TempDir()
	s.startWorkerWith(s.pool, func(_ *worker.Config, rc *batch.Config) { rc.Jobs[jobs.CorpCodeSync] = corpcode.Job{Dir: dir} })
}

// fakeCounts returns what the fake universe says about tracking: tracked
// (construction) companies, and the listed ones among them.
func fakeCounts(s *testSystem) (tracked, listedTracked int) {
	for _, c := range s.fake.Companies() {
		if c.Construction {
			tracked++
			if c.StockCode != "" {
				listedTracked++
			}
		}
	}
	return tracked, listedTracked
}

// corpCodeSync: one download, every company of the archive upserted, the
// construction companies tracked; a second run is idempotent and removes
// the first run's file.
func TestRadar_CorpCodeSync(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, &testSystemOpts{fake: fakeupstream.Config{Companies: 2500}})
	dir := t.TempDir()
	s.startWorkerWith(s.pool, func(_ *worker.Config, rc *batch.Config) {
		rc.Jobs[jobs.CorpCodeSync] = corpcode.Job{Dir: dir}
	})

	accepted, done := s.runJob(jobs.CorpCodeSync, `{"params":{}}`)
	require.Equal(t, float64(1), accepted["estimatedCalls"])
	exec := execution(t, done)
	require.Equal(t, float64(3), exec["chunksTotal"], "2,500 companies in chunks of 1,000")
	require.Equal(t, float64(2500), exec["itemsWritten"])
	require.Equal(t, float64(2500), exec["domainRows"])
	require.Equal(t, float64(1), exec["externalCalls"])
	require.Equal(t, 2500, s.count(`SELECT count(*) FROM company`))
	tracked, listedTracked := fakeCounts(s)
	require.Equal(t, tracked, s.count(`SELECT count(*) FROM company WHERE tracked`))
	require.Equal(t, listedTracked, s.count(`SELECT count(*) FROM company WHERE tracked AND stock_code IS NOT NULL`))
	require.Equal(t, 0, s.count(`SELECT count(*) FROM company WHERE stock_code = '' OR modify_date IS NULL`),
		"DART's ' ' stock code is NULL; every modify date parsed")
	var firstPath string
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT path FROM corp_code_download`).Scan(&firstPath))
	require.FileExists(t, firstPath)

	_, again := s.runJob(jobs.CorpCodeSync, `{}`)
	require.Nil(t, again["resumesExecutionId"], "a completed run is not resumed")
	require.Equal(t, 2500, s.count(`SELECT count(*) FROM company`), "idempotent upserts")
	require.Equal(t, int64(2), s.fake.Stats().Calls[fakeupstream.EndpointCorpCode]["all"])
	require.NoFileExists(t, firstPath, "the previous instance's archive is removed")
	require.Equal(t, 1, s.count(`SELECT count(*) FROM corp_code_download`))

	status, out := s.post("/v1/jobs/corpCodeSync/requests", `{"params":{"full":true}}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, out["detail"], "params.full")
}

// blockingJob wraps a job so that its n-th Process call (counted from 1)
// blocks until the execution's context ends: a "kill" in the middle of a
// chunk, deterministic.
type blockingJob struct {
	batch.Job
	n       int32
	calls   atomic.Int32
	blocked chan struct{}
}

func newBlockingJob(job batch.Job, n int32) *blockingJob {
	return &blockingJob{Job: job, n: n, blocked: make(chan struct{})}
}

func (j *blockingJob) Process(ctx context.Context, run *batch.Run, chunk string) (*batch.ChunkResult, error) {
	if j.calls.Add(1) == j.n {
		close(j.blocked)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return j.Job.Process(ctx, run, chunk)
}

// EndRun passes the end of an execution on to the wrapped job.
func (j *blockingJob) EndRun(run *batch.Run) {
	if ender, ok := j.Job.(batch.RunEnder); ok {
		ender.EndRun(run)
	}
}

// corpCodeSync killed during the load (the worker's drain timeout cancels
// the chunk in flight): a new request reuses the archive while it is still
// there and resumes after the committed chunks; once the temporary
// directory is wiped (a new container), it downloads again and reads the
// new file (in another order) from the start; the company count then
// equals the archive's.
func TestRadar_CorpCodeSyncRedownload(t *testing.T) {
	t.Parallel()
	const companies = 3500 // 4 chunks
	s := newTestSystem(t, &testSystemOpts{
		fake: fakeupstream.Config{Companies: companies},
		env:  map[string]string{"BUILDRISK_DRAIN_TIMEOUT": "200ms"},
	})
	dir := filepath.Join(t.TempDir(), "tmpfs")
	killDuring := func(n int32) map[string]any {
		t.Helper()
		blocking := newBlockingJob(corpcode.Job{Dir: dir}, n)
		w, _ := s.startWorkerWith(s.pool, func(_ *worker.Config, rc *batch.Config) { rc.Jobs[jobs.CorpCodeSync] = blocking })
		id := s.requestJob(jobs.CorpCodeSync, `{}`)["requestId"].(string)
		<-blocking.blocked
		require.NoError(t, w.Drain(context.Background()))
		out := s.waitRequest(id, "DONE", "FAILED")
		exec := execution(t, out)
		require.Equal(t, "STOPPED", exec["status"], "%v", out)
		require.Equal(t, batch.MessageDrainTimeout, exec["exitMessage"])
		return exec
	}
	chunkKeys := func() []string {
		rows, err := s.pool.Query(context.Background(), `SELECT chunk FROM job_checkpoint ORDER BY committed_at, chunk`)
		require.NoError(t, err)
		var keys []string
		for rows.Next() {
			var k string
			require.NoError(t, rows.Scan(&k))
			keys = append(keys, k)
		}
		require.NoError(t, rows.Err())
		return keys
	}
	sha := func(key string) string { return key[:strings.Index(key, ":")] }

	// Killed in chunk 2: chunk 1 committed.
	first := killDuring(2)
	require.Equal(t, float64(1), first["chunksDone"])
	require.Equal(t, 1000, s.count(`SELECT count(*) FROM company`))

	// The file is still there: reused (no download), chunk 1 skipped; killed
	// again in the second chunk it processes (chunk 3).
	second := killDuring(2)
	require.Equal(t, float64(2), second["chunksDone"])
	require.Equal(t, int64(1), s.fake.Stats().Calls[fakeupstream.EndpointCorpCode]["all"], "the archive was reused")
	keys := chunkKeys()
	require.Len(t, keys, 2)
	require.Equal(t, sha(keys[0]), sha(keys[1]), "both chunks from the same file")

	// A new container: the temporary directory is empty.
	require.NoError(t, os.RemoveAll(dir))
	s.startWorkerWith(s.pool, func(_ *worker.Config, rc *batch.Config) { rc.Jobs[jobs.CorpCodeSync] = corpcode.Job{Dir: dir} })
	accepted := s.requestJob(jobs.CorpCodeSync, `{}`)
	require.Equal(t, second["id"], accepted["resumesExecutionId"], "same params: a resume")
	done := s.waitRequest(accepted["requestId"].(string), "DONE", "FAILED")
	exec := execution(t, done)
	require.Equal(t, "COMPLETED", exec["status"], "%v", done)
	require.Equal(t, float64(1), exec["externalCalls"], "downloaded again")
	require.Equal(t, int64(2), s.fake.Stats().Calls[fakeupstream.EndpointCorpCode]["all"])
	require.Equal(t, companies, s.count(`SELECT count(*) FROM company`), "the company count equals the archive's")

	keys = chunkKeys()
	require.Len(t, keys, 2+4, "the old file's 2 checkpoints stay; the new file's 4 chunks all ran")
	newSHA := sha(keys[2])
	require.NotEqual(t, sha(keys[0]), newSHA, "the re-downloaded file differs (another order): new chunk keys")
	for _, k := range keys[2:] {
		require.Equal(t, newSHA, sha(k))
	}
	var recorded string
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT sha256 FROM corp_code_download`).Scan(&recorded))
	require.Equal(t, newSHA, recorded)
	require.Equal(t, companies, s.count(`SELECT count(*) FROM company WHERE execution_id = $1`, exec["id"]),
		"the resumed execution wrote every company: the new file was read from its start")
}

// filingParse: one chunk per tracked company (estimate = tracked companies,
// or corpCodes), filings stored once, risk-relevant ones flagged with the
// reason of the documented rules.
func TestRadar_FilingParse(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, &testSystemOpts{fake: fakeupstream.Config{Companies: 300}})
	s.startRadarWorker()

	status, out := s.post("/v1/jobs/filingParse/requests", `{"params":{"from":"2025-01-01","to":"2025-06-30"}}`)
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	require.Equal(t, float64(0), out["estimatedCalls"], "no tracked companies yet")
	failed := s.waitRequest(out["requestId"].(string), "DONE", "FAILED")
	require.Equal(t, "FAILED", failed["status"])
	require.Contains(t, execution(t, failed)["exitMessage"], filing.ErrNoCompanies.Error())

	s.runJob(jobs.CorpCodeSync, `{}`)
	tracked, _ := fakeCounts(s)
	body := `{"params":{"from":"2025-01-01","to":"2025-12-31"}}`
	accepted, done := s.runJob(jobs.FilingParse, body)
	require.Equal(t, float64(tracked), accepted["estimatedCalls"], "one page per tracked company")
	exec := execution(t, done)
	require.Equal(t, float64(tracked), exec["chunksTotal"])
	require.Equal(t, float64(tracked), exec["externalCalls"], "every company's filings fit one page")
	require.Len(t, s.callsPerKey(fakeupstream.EndpointFilingList), tracked)
	stored := s.count(`SELECT count(*) FROM filing`)
	require.Positive(t, stored)
	require.Equal(t, float64(stored), exec["itemsWritten"])
	require.Equal(t, float64(stored), exec["domainRows"])
	require.Zero(t, s.count(`SELECT count(*) FROM filing f WHERE NOT EXISTS (SELECT 1 FROM company c WHERE c.corp_code = f.corp_code AND c.tracked)`))

	// Flags: recomputed from the titles with the documented rules.
	rows, err := s.pool.Query(context.Background(), `SELECT report_nm, risk_flag, risk_reason FROM filing`)
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
	for _, c := range s.fake.Companies() {
		distressed[c.CorpCode] = c.Distressed
	}
	risky, err := s.pool.Query(context.Background(), `SELECT DISTINCT corp_code FROM filing WHERE risk_flag`)
	require.NoError(t, err)
	for risky.Next() {
		var code string
		require.NoError(t, risky.Scan(&code))
		require.True(t, distressed[code], "only distressed companies file risk reports: %s", code)
	}
	require.NoError(t, risky.Err())

	// Again: a new instance, the same rows.
	s.runJob(jobs.FilingParse, body)
	require.Equal(t, stored, s.count(`SELECT count(*) FROM filing`), "idempotent")

	// Explicit corpCodes: estimate and chunks follow them.
	var some []string
	for _, c := range s.fake.Companies()[:3] {
		some = append(some, `"`+c.CorpCode+`"`)
	}
	accepted, done = s.runJob(jobs.FilingParse, `{"params":{"from":"2025-01-01","to":"2025-01-31","corpCodes":[`+strings.Join(some, ",")+`]}}`)
	require.Equal(t, float64(3), accepted["estimatedCalls"])
	require.Equal(t, float64(3), execution(t, done)["chunksTotal"])

	status, out = s.post("/v1/jobs/filingParse/requests", `{"params":{"from":"2024-01-01","to":"2025-01-01"}}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, out["detail"], "params.to")
}

// stockPrice: chunks of 100 listed tracked companies, one call each; a
// weekend calls nothing and a holiday skips every company, neither fails.
func TestRadar_StockPrice(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, &testSystemOpts{fake: fakeupstream.Config{Companies: 1500}})
	s.startRadarWorker()
	s.runJob(jobs.CorpCodeSync, `{}`)
	_, listed := fakeCounts(s)
	require.Greater(t, listed, 100, "more than one chunk")
	chunks := float64((listed + 99) / 100)

	accepted, done := s.runJob(jobs.StockPrice, `{"params":{"date":"2025-03-14"}}`)
	require.Equal(t, float64(listed), accepted["estimatedCalls"])
	exec := execution(t, done)
	require.Equal(t, chunks, exec["chunksTotal"])
	require.Equal(t, float64(listed), exec["externalCalls"])
	require.Equal(t, float64(listed), exec["itemsWritten"])
	require.Equal(t, float64(listed), exec["domainRows"])
	require.Equal(t, listed, s.count(`SELECT count(*) FROM stock_price WHERE trade_date = '2025-03-14'`))
	require.Zero(t, s.count(`SELECT count(*) FROM stock_price p JOIN company c USING (corp_code) WHERE c.stock_code <> p.short_code OR NOT c.tracked`))
	require.Zero(t, s.count(`SELECT count(*) FROM stock_price WHERE close <= 0 OR high < low OR market_cap <= 0`))

	// Saturday: nothing called, every company skipped, COMPLETED.
	accepted, done = s.runJob(jobs.StockPrice, `{"params":{"date":"2025-03-15"}}`)
	require.Equal(t, float64(0), accepted["estimatedCalls"])
	exec = execution(t, done)
	require.Equal(t, float64(0), exec["externalCalls"])
	require.Equal(t, float64(listed), exec["itemsSkipped"])
	require.Equal(t, float64(0), exec["itemsFailed"])
	require.Contains(t, exec["exitMessage"], fmt.Sprintf("skipped %d (weekend: %d)", listed, listed), "skipped items carry their reason")

	// Children's Day, a Monday: KRX answers no items; skipped, not failed.
	_, done = s.runJob(jobs.StockPrice, `{"params":{"date":"2025-05-05"}}`)
	exec = execution(t, done)
	require.Equal(t, float64(listed), exec["externalCalls"])
	require.Equal(t, float64(listed), exec["itemsSkipped"])
	require.Equal(t, float64(0), exec["itemsWritten"])
	require.Contains(t, exec["exitMessage"], "no price for the day (holiday or not traded)")
	require.Zero(t, s.count(`SELECT count(*) FROM stock_price WHERE trade_date IN ('2025-03-15', '2025-05-05')`))

	// The same day again: idempotent.
	s.runJob(jobs.StockPrice, `{"params":{"date":"2025-03-14"}}`)
	require.Equal(t, listed, s.count(`SELECT count(*) FROM stock_price`))

	// onlyMissing: 5 prices lost, in the first and the last chunk; the estimate and
	// the calls are exactly those 5.
	n, err := s.pool.Exec(context.Background(), `DELETE FROM stock_price WHERE trade_date = '2025-03-14' AND short_code IN (
		(SELECT short_code FROM stock_price WHERE trade_date = '2025-03-14' ORDER BY short_code OFFSET 3 LIMIT 2)
		UNION ALL (SELECT short_code FROM stock_price WHERE trade_date = '2025-03-14' ORDER BY short_code OFFSET $1 LIMIT 3))`, listed-3)
	require.NoError(t, err)
	require.Equal(t, int64(5), n.RowsAffected())
	before := s.fake.Stats().Total
	accepted, done = s.runJob(jobs.StockPrice, `{"params":{"date":"2025-03-14","onlyMissing":true}}`)
	require.Equal(t, float64(5), accepted["estimatedCalls"])
	exec = execution(t, done)
	require.Equal(t, float64(5), exec["externalCalls"])
	require.Equal(t, float64(5), exec["itemsWritten"])
	require.Equal(t, int64(5), s.fake.Stats().Total-before)
	require.Equal(t, listed, s.count(`SELECT count(*) FROM stock_price WHERE trade_date = '2025-03-14'`))

	status, out := s.post("/v1/jobs/stockPrice/requests", `{"params":{}}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, out["detail"], "params.date")
}

// A bad BUILDRISK_RULE_<NAME> is refused naming the variable; a good one
// reaches the rules job.
func TestRadar_RuleThresholdEnv(t *testing.T) {
	t.Parallel()
	base := map[string]string{"DATABASE_URL": "x"}
	load := func(k, v string) (*app.Config, error) {
		vars := map[string]string{k: v}
		for bk, bv := range base {
			vars[bk] = bv
		}
		return app.LoadEnv(func(name string) string { return vars[name] })
	}
	for _, bad := range [][2]string{
		{"BUILDRISK_RULE_PRICE_DRAWDOWN", "25"},
		{"BUILDRISK_RULE_PRICE_DRAWDOWN", "abc"},
		{"BUILDRISK_RULE_RISK_FILINGS", "1.5"},
		{"BUILDRISK_RULE_COMPOUND", "0"},
	} {
		_, err := load(bad[0], bad[1])
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), bad[0])
	}
	env, err := load("BUILDRISK_RULE_PRICE_DRAWDOWN", "0.35")
	require.NoError(t, err)
	require.Equal(t, 0.35, env.RuleThresholds[jobs.RulePriceDrawdown])
	require.Equal(t, float64(jobs.RuleRiskFilingsDefault), env.RuleThresholds[jobs.RuleRiskFilings])
	require.Equal(t, env.RuleThresholds, app.Registry(env)[jobs.Rules].(riskrule.Job).Thresholds)
}

// Every radar job's params are documented in the OpenAPI document (schema
// properties and an example that is valid), and so is GET /v1/alerts.
func TestRadar_OpenAPI(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, nil)
	status, doc := s.do(http.MethodGet, "/openapi.json", "", "")
	require.Equal(t, http.StatusOK, status)
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	resolve := func(schema map[string]any) map[string]any {
		if ref, ok := schema["$ref"].(string); ok {
			return schemas[strings.TrimPrefix(ref, "#/components/schemas/")].(map[string]any)
		}
		return schema
	}
	paths := doc["paths"].(map[string]any)
	for job, props := range map[string][]string{
		jobs.CorpCodeSync: {},
		jobs.FilingParse:  {"from", "to", "corpCodes"},
		jobs.StockPrice:   {"date"},
		jobs.Metrics:      {"date"},
		jobs.Rules:        {"date"},
	} {
		post := paths["/v1/jobs/"+job+"/requests"].(map[string]any)["post"].(map[string]any)
		content := post["requestBody"].(map[string]any)["content"].(map[string]any)["application/json"].(map[string]any)
		body := resolve(content["schema"].(map[string]any))
		params := resolve(body["properties"].(map[string]any)["params"].(map[string]any))
		properties, _ := params["properties"].(map[string]any)
		for _, p := range props {
			require.Contains(t, properties, p, job)
		}
		example, err := json.Marshal(content["example"].(map[string]any)["params"])
		require.NoError(t, err)
		def, _ := jobs.Default().Lookup(job)
		_, err = def.Decode(example)
		require.NoError(t, err, "%s's example is valid: %s", job, example)
	}
	alerts := paths["/v1/alerts"].(map[string]any)["get"].(map[string]any)
	var names []string
	for _, p := range alerts["parameters"].([]any) {
		names = append(names, p.(map[string]any)["name"].(string))
	}
	require.ElementsMatch(t, []string{"date", "company"}, names)
	require.Contains(t, alerts["description"], jobs.RuleCompound)
}

// Jobs that read what corpCodeSync or metrics write fail, with a message
// saying what to run, instead of succeeding with nothing done.
func TestRadar_NothingToDoFails(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, nil)
	s.startRadarWorker()
	for _, tc := range []struct{ job, body, message string }{
		{jobs.StockPrice, `{"params":{"date":"2025-03-14"}}`, stockprice.ErrNoCompanies.Error()},
		{jobs.Metrics, `{"params":{"date":"2025-03-14"}}`, riskmetric.ErrNoCompanies.Error()},
		{jobs.Rules, `{"params":{"date":"2025-03-14"}}`, riskrule.ErrNoMetrics.Error()},
	} {
		out := s.waitRequest(s.requestJob(tc.job, tc.body)["requestId"].(string), "DONE", "FAILED")
		require.Equal(t, "FAILED", out["status"], tc.job)
		require.Contains(t, execution(t, out)["exitMessage"], tc.message, tc.job)
	}
	require.Zero(t, s.count(`SELECT count(*) FROM job_request WHERE job = 'rules' AND source = 'chain'`), "a failed metrics run does not chain")
}

package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/jobset"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/jobs/corpcode"
	"github.com/buildrisk/radar/jobs/filing"
	"github.com/buildrisk/radar/jobs/riskmetric"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/jobs/stockprice"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// corpCodeSync: one download, every company of the archive upserted, the
// construction companies tracked; a second run is idempotent and removes
// the first run's file.
func TestRadar_CorpCodeSync(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Fake: fakeupstream.Config{Companies: 2500}})
	dir := t.TempDir()
	s.StartWorkerWith(s.Pool, func(_ *worker.Config, rc *batch.Config) {
		rc.Jobs[corpcode.Name] = corpcode.Job{Dir: dir}
	})

	accepted, done := s.RunJob(corpcode.Name, `{"params":{}}`)
	require.Equal(t, float64(1), accepted["estimatedCalls"])
	exec := apptest.Execution(t, done)
	require.Equal(t, float64(3), exec["chunksTotal"], "2,500 companies in chunks of 1,000")
	require.Equal(t, float64(2500), exec["itemsWritten"])
	require.Equal(t, float64(2500), exec["domainRows"])
	require.Equal(t, float64(1), exec["externalCalls"])
	require.Equal(t, 2500, s.Count(`SELECT count(*) FROM company`))
	tracked, listedTracked := apptest.FakeCounts(s)
	require.Equal(t, tracked, s.Count(`SELECT count(*) FROM company WHERE tracked`))
	require.Equal(t, listedTracked, s.Count(`SELECT count(*) FROM company WHERE tracked AND stock_code IS NOT NULL`))
	require.Equal(t, 0, s.Count(`SELECT count(*) FROM company WHERE stock_code = '' OR modify_date IS NULL`),
		"DART's ' ' stock code is NULL; every modify date parsed")
	var firstPath string
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT path FROM corp_code_download`).Scan(&firstPath))
	require.FileExists(t, firstPath)

	_, again := s.RunJob(corpcode.Name, `{}`)
	require.Nil(t, again["resumesExecutionId"], "a completed run is not resumed")
	require.Equal(t, 2500, s.Count(`SELECT count(*) FROM company`), "idempotent upserts")
	require.Equal(t, int64(2), s.Fake.Stats().Calls[fakeupstream.EndpointCorpCode]["all"])
	require.NoFileExists(t, firstPath, "the previous instance's archive is removed")
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM corp_code_download`))

	status, out := s.Post("/v1/jobs/corpCodeSync/requests", `{"params":{"full":true}}`)
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
	s := apptest.New(t, &apptest.Opts{
		Fake: fakeupstream.Config{Companies: companies},
		Env:  map[string]string{"BUILDRISK_DRAIN_TIMEOUT": "200ms"},
	})
	dir := filepath.Join(t.TempDir(), "tmpfs")
	killDuring := func(n int32) map[string]any {
		t.Helper()
		blocking := newBlockingJob(corpcode.Job{Dir: dir}, n)
		w, _ := s.StartWorkerWith(s.Pool, func(_ *worker.Config, rc *batch.Config) { rc.Jobs[corpcode.Name] = blocking })
		id := s.RequestJob(corpcode.Name, `{}`)["requestId"].(string)
		<-blocking.blocked
		require.NoError(t, w.Stop(context.Background()))
		out := s.WaitRequest(id, "DONE", "FAILED")
		exec := apptest.Execution(t, out)
		require.Equal(t, "STOPPED", exec["status"], "%v", out)
		require.Equal(t, batch.MessageDrainTimeout, exec["exitMessage"])
		return exec
	}
	chunkKeys := func() []string {
		rows, err := s.Pool.Query(context.Background(), `SELECT chunk FROM job_checkpoint ORDER BY committed_at, chunk`)
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
	require.Equal(t, 1000, s.Count(`SELECT count(*) FROM company`))

	// The file is still there: reused (no download), chunk 1 skipped; killed
	// again in the second chunk it processes (chunk 3).
	second := killDuring(2)
	require.Equal(t, float64(1), second["chunksDone"], "this execution's own chunk")
	require.Equal(t, float64(1), second["chunksBefore"], "the first execution's chunk")
	require.Equal(t, int64(1), s.Fake.Stats().Calls[fakeupstream.EndpointCorpCode]["all"], "the archive was reused")
	keys := chunkKeys()
	require.Len(t, keys, 2)
	require.Equal(t, sha(keys[0]), sha(keys[1]), "both chunks from the same file")

	// A new container: the temporary directory is empty.
	require.NoError(t, os.RemoveAll(dir))
	s.StartWorkerWith(s.Pool, func(_ *worker.Config, rc *batch.Config) { rc.Jobs[corpcode.Name] = corpcode.Job{Dir: dir} })
	accepted := s.RequestJob(corpcode.Name, `{}`)
	require.Equal(t, second["id"], accepted["resumesExecutionId"], "same params: a resume")
	done := s.WaitRequest(accepted["requestId"].(string), "DONE", "FAILED")
	exec := apptest.Execution(t, done)
	require.Equal(t, "COMPLETED", exec["status"], "%v", done)
	require.Equal(t, float64(1), exec["externalCalls"], "downloaded again")
	require.Equal(t, int64(2), s.Fake.Stats().Calls[fakeupstream.EndpointCorpCode]["all"])
	require.Equal(t, companies, s.Count(`SELECT count(*) FROM company`), "the company count equals the archive's")

	keys = chunkKeys()
	require.Len(t, keys, 2+4, "the old file's 2 checkpoints stay; the new file's 4 chunks all ran")
	newSHA := sha(keys[2])
	require.NotEqual(t, sha(keys[0]), newSHA, "the re-downloaded file differs (another order): new chunk keys")
	for _, k := range keys[2:] {
		require.Equal(t, newSHA, sha(k))
	}
	var recorded string
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT sha256 FROM corp_code_download`).Scan(&recorded))
	require.Equal(t, newSHA, recorded)
	require.Equal(t, companies, s.Count(`SELECT count(*) FROM company WHERE execution_id = $1`, exec["id"]),
		"the resumed execution wrote every company: the new file was read from its start")
}

// A bad BUILDRISK_RULE_<NAME> is refused naming the variable; a good one
// reaches the rules job.
func TestRadar_RuleThresholdEnv(t *testing.T) {
	t.Parallel()
	base := map[string]string{"DATABASE_URL": "x"}
	load := func(k, v string) (*config.Config, error) {
		vars := map[string]string{k: v}
		for bk, bv := range base {
			vars[bk] = bv
		}
		return config.LoadEnv(func(name string) string { return vars[name] })
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
	require.Equal(t, 0.35, env.RuleThresholds[riskrule.PriceDrawdown])
	require.Equal(t, float64(riskrule.RiskFilingsDefault), env.RuleThresholds[riskrule.RiskFilings])
	require.Equal(t, env.RuleThresholds, batch.Implementations(app.Jobs(env, nil))[riskrule.Name].(riskrule.Job).Thresholds)
}

// Every radar job's params are documented in the OpenAPI document (schema
// properties and an example that is valid), and so is GET /v1/alerts.
func TestRadar_OpenAPI(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	status, doc := s.Do(http.MethodGet, "/openapi.json", "", "")
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
		corpcode.Name:   {},
		filing.Name:     {"from", "to", "corpCodes"},
		stockprice.Name: {"date"},
		riskmetric.Name: {"date"},
		riskrule.Name:   {"date"},
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
		def, _ := jobset.Catalog().Lookup(job)
		_, err = def.Decode(example)
		require.NoError(t, err, "%s's example is valid: %s", job, example)
	}
	alerts := paths["/v1/alerts"].(map[string]any)["get"].(map[string]any)
	var names []string
	for _, p := range alerts["parameters"].([]any) {
		names = append(names, p.(map[string]any)["name"].(string))
	}
	require.ElementsMatch(t, []string{"date", "company"}, names)
	require.Contains(t, alerts["description"], riskrule.Compound)
}

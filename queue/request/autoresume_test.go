package request_test

import (
	"cmp"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/sql/pgtest"
	"github.com/buildrisk/radar/sql/pgtx"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type noParams struct{}

type resumeBundle struct {
	pool        *pgxpool.Pool
	enqueuer    *request.Owner
	river       *river.Client[pgx.Tx]
	tel         *observabilitytest.Telemetry
	jobCatalog  *catalog.Catalog
	providers   *observability.Providers
	instruments *observability.Instruments
}

func newResumeBundle(t *testing.T, policy request.ResumePolicy) *resumeBundle {
	t.Helper()
	return newStockPriceBundle(t, request.Config{Resume: policy})
}

// newStockPriceBundle returns a database and an owner of the one job
// stockPrice, with a River client that only inserts, configured by cfg
// (its Catalog and Instruments are set here).
func newStockPriceBundle(t *testing.T, cfg request.Config) *resumeBundle {
	t.Helper()
	cfg.Catalog = catalog.NewCatalog(&catalog.Spec[noParams]{JobName: "stockPrice", Desc: "test job"})
	return newBundle(t, cfg)
}

// newBundle returns a database and an owner with a River client that only
// inserts, configured by cfg; without a catalog it knows every job of the
// row factory (no params), metrics chaining to rules.
func newBundle(t *testing.T, cfg request.Config) *resumeBundle {
	t.Helper()
	pool := pgtest.NewPool(t)
	tel := observabilitytest.NewTelemetry(t)
	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	if cfg.Catalog == nil {
		var defs []catalog.Definition
		for _, name := range []string{"aptTrade", "corpCodeSync", "filingParse", "stockPrice", "creditEval", "rules"} {
			defs = append(defs, &catalog.Spec[noParams]{JobName: name, Desc: "test job"})
		}
		defs = append(defs, &catalog.Spec[noParams]{JobName: "metrics", Desc: "test job", NextJob: "rules"})
		cfg.Catalog = catalog.NewCatalog(defs...)
	}
	cfg.Instruments = tel.Instruments
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	owner, err := request.NewOwner(pool, riverClient, cfg)
	require.NoError(t, err)
	return &resumeBundle{pool: pool, enqueuer: owner, river: riverClient, tel: tel, jobCatalog: cfg.Catalog, providers: tel.Providers, instruments: tel.Instruments}
}

// resumes returns the automatic resumes recorded, by the execution they
// resume (requested_by "resume:CAUSE:execution ID"), as their causes.
func (b *resumeBundle) resumes(t *testing.T, db queries.DBTX) map[int64]radartype.StopCause {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT resume_cause, (regexp_match(requested_by, 'execution (\d+)$'))[1]::bigint FROM job_request WHERE source = 'resume'`)
	require.NoError(t, err)
	out := map[int64]radartype.StopCause{}
	for rows.Next() {
		var cause string
		var exec int64
		require.NoError(t, rows.Scan(&cause, &exec))
		out[exec] = radartype.StopCause(cause)
	}
	require.NoError(t, rows.Err())
	return out
}

// resumableInstance inserts an instance of job whose params ({}) are those
// a resume of its runs repeats, so that the restart rules resume them.
func resumableInstance(t testing.TB, db queries.DBTX, job string) int64 {
	t.Helper()
	return testfactory.Instance(context.Background(), t, db, &testfactory.InstanceOpts{Job: job, ParamsHash: catalog.ParamsHash([]byte("{}"))}).ID
}

// riverState returns the state of River job id, read through River's API.
func (b *resumeBundle) riverState(t *testing.T, id int64) rivertype.JobState {
	t.Helper()
	return riverStateOf(t, b.river, id)
}

// stopRun enqueues a request, gives it an execution that ended with status,
// and finishes the request, the way the runner records a stop. It returns
// the finished request and its execution's id.
func (b *resumeBundle) stopRun(t *testing.T, confirmPurge bool, status radartype.ExecutionStatus) (*queries.JobRequest, int64) {
	t.Helper()
	ctx := context.Background()
	res, err := b.enqueuer.Enqueue(ctx, &request.EnqueueParams{Job: "stockPrice", Params: []byte("{}"), Source: radartype.SourceAPI, ConfirmPurge: confirmPurge})
	require.NoError(t, err)
	q := queries.New()
	req := res.Request
	var instanceID int64
	if res.ResumesExecutionID != nil {
		exec, err := q.JobExecutionGetByID(ctx, b.pool, *res.ResumesExecutionID)
		require.NoError(t, err)
		instanceID = exec.InstanceID
	} else {
		inst, err := q.JobInstanceInsert(ctx, b.pool, &queries.JobInstanceInsertParams{Job: req.Job, Params: req.Params, ParamsHash: req.ParamsHash, ConfirmPurge: confirmPurge})
		require.NoError(t, err)
		instanceID = inst.ID
	}
	exec := testfactory.Execution(ctx, t, b.pool, &testfactory.ExecutionOpts{InstanceID: instanceID, RequestID: req.ID, WorkerID: "w", Status: status})
	req.Status = string(status.RequestStatus())
	return req, exec.ID
}

// endRun runs request requestID as an execution of the instance of
// execution previous that ends with status (its request finished with it)
// and returns the new execution's id.
func (b *resumeBundle) endRun(t *testing.T, requestID, previous int64, status radartype.ExecutionStatus) int64 {
	t.Helper()
	ctx := context.Background()
	instanceID := testfactory.ExecutionByID(ctx, t, b.pool, previous).InstanceID
	return testfactory.Execution(ctx, t, b.pool, &testfactory.ExecutionOpts{
		InstanceID: instanceID, RequestID: requestID, WorkerID: "w", Status: status, Unlinked: true,
	}).ID
}

func (b *resumeBundle) resume(t *testing.T, s *request.Stopped) int64 {
	t.Helper()
	var id int64
	require.NoError(t, pgtx.InTx(context.Background(), b.pool, func(tx pgx.Tx) error {
		var err error
		id, err = b.enqueuer.ResumeTx(context.Background(), tx, s)
		return err
	}))
	return id
}

func TestResume_DrainedRunResumesItself(t *testing.T) {
	t.Parallel()
	b := newResumeBundle(t, request.ResumePolicy{Causes: []radartype.StopCause{radartype.CauseDrain, radartype.CauseReap}, MaxPerDay: 3, Backoff: time.Minute})
	req, execID := b.stopRun(t, false, radartype.ExecutionStopped)

	before := time.Now()
	id := b.resume(t, &request.Stopped{Request: req, ExecutionID: execID, Cause: radartype.CauseDrain})
	require.NotZero(t, id, "a drained run resumes")

	got, err := queries.New().JobRequestGetByID(context.Background(), b.pool, id)
	require.NoError(t, err)
	require.Equal(t, string(radartype.SourceResume), got.Source)
	require.Equal(t, string(radartype.CauseDrain), got.ResumeCause)
	require.NotNil(t, got.ResumesExecutionID)
	require.Equal(t, execID, *got.ResumesExecutionID)
	require.Equal(t, string(radartype.RequestQueued), got.Status)

	// The request waits for the backoff (by the database's clock), so a
	// crash loop cannot spin; its River job is available at once, so no
	// River leader has to move it from scheduled before it can start.
	require.NotNil(t, got.NotBefore)
	require.False(t, got.NotBefore.Before(before.Add(time.Minute-time.Second)), "not before %s, want about a minute after %s", got.NotBefore, before)
	var state string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT state FROM river_job WHERE id = $1`, *got.RiverJobID).Scan(&state))
	require.Equal(t, "available", state)
	wait, err := queries.New().JobRequestWait(context.Background(), b.pool, id)
	require.NoError(t, err)
	require.InDelta(t, 60, wait, 5)

	requireMetric(t, b.providers, 1, observability.MetricAutoResumes, map[string]string{"job": "stockPrice", "cause": "drain"})
	requireMetric(t, b.providers, 1, observability.MetricRequests, map[string]string{"job": "stockPrice", "source": "resume", "result": "accepted"})
}

func TestResume_DecisionsAndFailuresNeverResume(t *testing.T) {
	t.Parallel()
	b := newResumeBundle(t, request.ResumePolicy{Causes: []radartype.StopCause{radartype.CauseDrain, radartype.CauseReap}, MaxPerDay: 3})
	for _, cause := range []radartype.StopCause{radartype.CauseOperator, radartype.CauseCap, radartype.CauseMaxCalls, radartype.CauseFailure, radartype.CauseDatabase} {
		req, execID := b.stopRun(t, false, radartype.ExecutionStopped)
		require.Zero(t, b.resume(t, &request.Stopped{Request: req, ExecutionID: execID, Cause: cause}), "cause %s must not resume", cause)
	}
	// A confirmPurge run is never resumed, whatever stopped it.
	req, execID := b.stopRun(t, true, radartype.ExecutionStopped)
	require.Zero(t, b.resume(t, &request.Stopped{Request: req, ExecutionID: execID, Cause: radartype.CauseDrain}))

	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM job_request WHERE source = 'resume'`).Scan(&n))
	require.Zero(t, n)
}

func TestResume_AttemptLimitPerInstanceAndDay(t *testing.T) {
	t.Parallel()
	b := newResumeBundle(t, request.ResumePolicy{Causes: []radartype.StopCause{radartype.CauseReap}, MaxPerDay: 2, Backoff: time.Millisecond})
	req, execID := b.stopRun(t, false, radartype.ExecutionAbandoned)
	for attempt := 1; attempt <= 2; attempt++ {
		id := b.resume(t, &request.Stopped{Request: req, ExecutionID: execID, Cause: radartype.CauseReap})
		require.NotZero(t, id, "attempt %d", attempt)
		// The resumed run dies too: its worker is reaped again.
		got, err := queries.New().JobRequestGetByID(context.Background(), b.pool, id)
		require.NoError(t, err)
		execID = b.endRun(t, id, execID, radartype.ExecutionAbandoned)
		req = got
	}
	require.Zero(t, b.resume(t, &request.Stopped{Request: req, ExecutionID: execID, Cause: radartype.CauseReap}), "the third attempt of the day is refused")

	requireMetric(t, b.providers, 2, observability.MetricAutoResumes, map[string]string{"job": "stockPrice", "cause": "reap"})
	requireMetric(t, b.providers, 1, observability.MetricAutoResumesRefused, map[string]string{"job": "stockPrice", "cause": "reap"})
}

// A rolling deploy drains every worker in turn: the drains' resumes never
// count toward the day's attempts, which stop crash loops only.
func TestResume_DrainsDoNotSpendTheDayAttempts(t *testing.T) {
	t.Parallel()
	b := newResumeBundle(t, request.ResumePolicy{Causes: []radartype.StopCause{radartype.CauseDrain, radartype.CauseReap}, MaxPerDay: 1, Backoff: time.Millisecond})
	req, execID := b.stopRun(t, false, radartype.ExecutionStopped)
	next := func(id int64, status radartype.ExecutionStatus) {
		t.Helper()
		got, err := queries.New().JobRequestGetByID(context.Background(), b.pool, id)
		require.NoError(t, err)
		execID = b.endRun(t, id, execID, status)
		req = got
	}
	// Four workers drained one after another (a deploy): four resumes.
	for drain := 1; drain <= 4; drain++ {
		id := b.resume(t, &request.Stopped{Request: req, ExecutionID: execID, Cause: radartype.CauseDrain})
		require.NotZero(t, id, "drain %d resumes", drain)
		next(id, radartype.ExecutionAbandoned)
	}
	// The day's one attempt is still there for a crash.
	id := b.resume(t, &request.Stopped{Request: req, ExecutionID: execID, Cause: radartype.CauseReap})
	require.NotZero(t, id, "the drains spent none of the day's attempts")
	next(id, radartype.ExecutionAbandoned)
	require.Zero(t, b.resume(t, &request.Stopped{Request: req, ExecutionID: execID, Cause: radartype.CauseReap}), "a second crash is refused")
	requireMetric(t, b.providers, 4, observability.MetricAutoResumes, map[string]string{"job": "stockPrice", "cause": "drain"})
	requireMetric(t, b.providers, 1, observability.MetricAutoResumesRefused, map[string]string{"job": "stockPrice", "cause": "reap"})
}

// A run stopped by a provider's Retry-After resumes when the provider
// said, by the database's clock: Stopped.Wait from the stop's recording,
// not the policy's backoff. The time is kept on the execution (resume_at),
// so a stop finished by the reconcile loop, which has no Wait, waits for the
// same moment. Those resumes do not spend the day's attempts: the provider
// may limit a long run by the hour.
func TestResume_ProviderRateWaitsForTheProvider(t *testing.T) {
	t.Parallel()
	b := newResumeBundle(t, request.ResumePolicy{Causes: []radartype.StopCause{radartype.CauseProviderRate, radartype.CauseReap}, MaxPerDay: 1, Backoff: time.Millisecond})
	ctx := context.Background()
	q := queries.New()
	req, execID := b.stopRun(t, false, radartype.ExecutionStopped)
	next := func(id int64) {
		t.Helper()
		got, err := q.JobRequestGetByID(ctx, b.pool, id)
		require.NoError(t, err)
		execID = b.endRun(t, id, execID, radartype.ExecutionStopped)
		req = got
	}
	dueIn := func(id int64) float64 {
		t.Helper()
		wait, err := q.JobRequestWait(ctx, b.pool, id)
		require.NoError(t, err)
		return wait
	}

	id := b.resume(t, &request.Stopped{Request: req, ExecutionID: execID, Cause: radartype.CauseProviderRate, Wait: time.Hour})
	require.NotZero(t, id, "a provider-rate stop resumes")
	require.InDelta(t, time.Hour.Seconds(), dueIn(id), 5, "due when the provider said, not after the 1ms backoff")
	exec, err := q.JobExecutionGetByID(ctx, b.pool, execID)
	require.NoError(t, err)
	require.Equal(t, string(radartype.CauseProviderRate), exec.StopCause)
	require.NotNil(t, exec.ResumeAt)
	got, err := q.JobRequestGetByID(ctx, b.pool, id)
	require.NoError(t, err)
	require.Equal(t, string(radartype.CauseProviderRate), got.ResumeCause)

	// The reconcile loop finishes a stop whose runner recorded the end (and
	// its resume_at) but not the request: it has the cause, not the Wait.
	next(id)
	_, err = q.JobExecutionSetStopCause(ctx, b.pool, &queries.JobExecutionSetStopCauseParams{
		ID: execID, StopCause: string(radartype.CauseProviderRate), ResumeInSeconds: pgtype.Float8{Float64: 1800, Valid: true},
	})
	require.NoError(t, err)
	id = b.resume(t, &request.Stopped{Request: req, ExecutionID: execID, Cause: radartype.CauseProviderRate})
	require.NotZero(t, id)
	require.InDelta(t, 1800, dueIn(id), 5, "the recorded time, not the backoff")

	// More provider-rate stops the same day: none spends the day's attempt.
	for range 3 {
		next(id)
		id = b.resume(t, &request.Stopped{Request: req, ExecutionID: execID, Cause: radartype.CauseProviderRate, Wait: time.Minute})
		require.NotZero(t, id, "a provider's wait is never refused")
	}
	next(id)
	require.NotZero(t, b.resume(t, &request.Stopped{Request: req, ExecutionID: execID, Cause: radartype.CauseReap}), "the day's one attempt is still there for a crash")
	requireMetric(t, b.providers, 5, observability.MetricAutoResumes, map[string]string{"job": "stockPrice", "cause": "provider-rate"})
	requireMetric(t, b.providers, 0, observability.MetricAutoResumesRefused, nil)
}

func TestParseResumeCauses(t *testing.T) {
	t.Parallel()
	causes, err := request.ParseResumeCauses(request.AutoResumeCausesDefault)
	require.NoError(t, err)
	require.Equal(t, []radartype.StopCause{"drain", "reap", "database", "provider-rate"}, causes, "every cause of infrastructure, and a provider's Retry-After, resumes by default")
	causes, err = request.ParseResumeCauses("none")
	require.NoError(t, err)
	require.Empty(t, causes)
	_, err = request.ParseResumeCauses("drain,operator")
	require.ErrorContains(t, err, `"operator"`)
}

func requireMetric(t *testing.T, providers *observability.Providers, want float64, name string, labels map[string]string) {
	t.Helper()
	got, err := observabilitytest.MetricValue(providers, name, labels)
	require.NoError(t, err)
	require.Equal(t, want, got, "%s%v", name, labels)
}

// dueAt is a schedule table for the owner: each job is due once, at its
// time.
type dueAt map[string]time.Time

func (d dueAt) NextDue(job string, from time.Time) (time.Time, bool) {
	t, ok := d[job]
	return t, ok && !t.Before(from)
}

// A run stopped by its provider's daily cap resumes by itself at the
// provider's next reset (midnight in the policy's zone, by the budget's
// clock) when the policy names cap; a scheduled run of the same provider
// due within the hour after the reset goes first: the resume waits until
// it is due. Neither resume spends the day's attempts.
func TestResume_CapResumesAtTheNextReset(t *testing.T) {
	t.Parallel()
	seoul, err := time.LoadLocation("Asia/Seoul")
	require.NoError(t, err)
	clock := time.Date(2026, 12, 8, 23, 59, 0, 0, seoul) // a minute before the reset
	policy := request.ResumePolicy{Causes: []radartype.StopCause{radartype.CauseCap}, MaxPerDay: 1, Backoff: time.Second, Location: seoul}
	for _, tc := range []struct {
		name      string
		schedules request.DueTimes
		wait      time.Duration
	}{
		{"AtTheReset", nil, time.Minute},
		{"AfterAScheduledRunOfTheProvider", dueAt{"filingParse": clock.Add(time.Minute + 20*time.Minute)}, 21 * time.Minute},
		{"NotForAnotherProvidersRun", dueAt{"metrics": clock.Add(time.Minute + 20*time.Minute)}, time.Minute},
		{"NotForARunDueLater", dueAt{"filingParse": clock.Add(time.Minute + 2*time.Hour)}, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t, request.Config{
				Catalog: catalog.NewCatalog(
					&catalog.Spec[noParams]{JobName: "stockPrice", Desc: "test job", ProviderName: "KRX"},
					&catalog.Spec[noParams]{JobName: "filingParse", Desc: "test job", ProviderName: "KRX"},
					&catalog.Spec[noParams]{JobName: "metrics", Desc: "test job"},
				),
				Resume: policy, Schedules: tc.schedules, Now: func() time.Time { return clock },
			})
			for range 2 { // twice: a cap resume spends none of the day's one attempt
				req, execID := b.stopRun(t, false, radartype.ExecutionStopped)
				id := b.resume(t, &request.Stopped{Request: req, ExecutionID: execID, Cause: radartype.CauseCap})
				require.NotZero(t, id, "a capped run resumes by itself")
				var waits float64
				require.NoError(t, b.pool.QueryRow(context.Background(),
					`SELECT extract(epoch FROM not_before - created_at) FROM job_request WHERE id = $1`, id).Scan(&waits))
				require.Equal(t, tc.wait.Seconds(), waits, "the resume waits for the reset")
				var resumeIn float64
				require.NoError(t, b.pool.QueryRow(context.Background(),
					`SELECT extract(epoch FROM e.resume_at - r.created_at) FROM job_execution e, job_request r WHERE e.id = $1 AND r.id = $2`, execID, id).Scan(&resumeIn))
				require.Equal(t, tc.wait.Seconds(), resumeIn, "the stop records when it resumes")
				testfactory.FinishRequest(context.Background(), t, b.pool, id, radartype.RequestDone, "")
			}
		})
	}
}

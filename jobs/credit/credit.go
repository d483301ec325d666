// Package credit is the creditEval job: a credit grade, once a day, for
// every company with outstanding exposure — the batch of the lost-events
// incident (docs/architecture.md), built so that its failure mode cannot
// recur silently.
//
// Targets are the exposure ledger's companies with outstanding_krw > 0, in
// corp code order, cut into chunks of ChunkSize; the plan
// is frozen in the database when an execution starts and read back a chunk
// at a time, so the worker's memory stays flat in the ledger's size. In a chunk
// every target gets one CREDIT lookup and, when the lookup answers with an
// empty grade, one call to the fallback crawl. The calls run on the
// bounded fan-out (batch.FanOutCommit, BUILDRISK_FANOUT slots), with no
// transaction and no database connection held; each grade is upserted on
// (corp_code, eval_date) in a checkpoint part as it comes back, so
// a company is written exactly once per day however often the job is
// stopped, killed and resumed, and a resume calls only the targets without
// a committed grade: a kill repeats at most 2 × BUILDRISK_FANOUT
// evaluations (those in flight and those whose part was committing).
//
// Every target is accounted: written, or failed when its calls still failed
// after the client's retries. More failures than FailureTolerance fail the
// execution, naming the first errors, and keep the grades already
// committed; a daily cap, maxCalls, a missing or rejected key, a stop or a
// drain stops handing over at once and ends the chunk with the grades in
// flight committed (STOPPED or FAILED, resumable). The package must not
// open a transaction of its own, nor call a provider while one is open.
package credit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/upstream"
)

// Values of credit_grade.source: which endpoint gave the grade.
const (
	SourceLookup   = "lookup"
	SourceFallback = "fallback"
)

// Failure tolerance: an execution fails as soon as more of its targets have
// failed than 1% of them or 50, whichever is smaller (so a small run
// tolerates none). Failed targets below it are counted (itemsFailed) and
// repaired by a backfill request.
const (
	FailureTolerancePercent = 1
	FailureToleranceMax     = 50
)

// FailureTolerance returns how many failed targets an instance of targets
// targets tolerates.
func FailureTolerance(targets int64) int64 {
	return min(FailureToleranceMax, targets*FailureTolerancePercent/100)
}

// firstErrorsNamed is how many item errors a failure message names.
const firstErrorsNamed = 3

// Job implements batch.Job for creditEval. Create it with New; one value
// serves every execution of a process (only one creditEval execution runs
// at a time in the cluster).
type Job struct {
	mu   sync.Mutex
	plan *declared
	// chunkSize is how many targets a chunk holds (ChunkSize unless
	// NewSized).
	chunkSize int
}

// declared is what the running execution declared: the tolerance of failed
// targets is a share of it.
type declared struct {
	executionID int64
	targets     int64
}

var (
	_ batch.Job              = (*Job)(nil)
	_ batch.DomainRowCounter = (*Job)(nil)
)

// New returns the creditEval job.
func New() *Job { return NewSized(ChunkSize) }

// NewSized returns the creditEval job with chunks of chunkSize targets
// (ChunkSize when below 1): tests use it to run several chunks over a
// small ledger.
func NewSized(chunkSize int) *Job {
	if chunkSize < 1 {
		chunkSize = ChunkSize
	}
	return &Job{chunkSize: chunkSize}
}

// Plan implements batch.Job. It freezes the execution's plan in the
// database (credit_eval_plan), a chunk per statement in keyset order of
// corp code (CreditEvalPlanPage): the ordered targets (for a backfill,
// those without a grade for today), without those inside the ranges of
// chunks this instance has already committed (a resume) and those
// committed in a checkpoint part, cut into chunks keyed "FIRST-LAST". The
// worker keeps only the chunks' keys and sizes, and reads each chunk's
// targets back when it processes it, so its memory does not grow with the
// ledger and no statement grows with it either. A target added to the
// ledger during the run waits for the next run; one removed during the run
// is still evaluated: the run does exactly what it declared. It declares
// as targets the committed chunks' and parts' targets plus the frozen
// ones, so the runner's accounting covers the whole instance.
func (j *Job) Plan(ctx context.Context, run *batch.Run) (*batch.Plan, error) {
	p, err := decode(run.Params)
	if err != nil {
		return nil, err
	}
	q := queries.New()
	committed, err := q.JobCheckpointListChunks(ctx, run.DB, run.InstanceID)
	if err != nil {
		return nil, fmt.Errorf("error reading checkpoints: %w", err)
	}
	totals, err := q.JobCheckpointTotals(ctx, run.DB, run.InstanceID)
	if err != nil {
		return nil, fmt.Errorf("error reading checkpoint totals: %w", err)
	}
	params := &queries.CreditEvalPlanPageParams{
		ExecutionID: run.ExecutionID, InstanceID: run.InstanceID, ChunkSize: int32(j.chunkSize),
		Backfill: p.Missing(), EvalDate: run.Calls.Today(), DoneChunks: committed,
	}
	params.DoneFirsts, params.DoneLasts = doneRanges(committed)
	keys := slices.Clone(committed)
	frozen := &declared{executionID: run.ExecutionID, targets: totals.Targets}
	// The plan is frozen in one transaction fenced on the execution: a run
	// that lost its execution neither clears nor writes a plan, so it can
	// never delete or overwrite the plan of the execution that took over.
	err = run.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if err := q.CreditEvalPlanClear(ctx, tx, run.ExecutionID); err != nil {
			return fmt.Errorf("error clearing earlier plans: %w", err)
		}
		if err := q.CreditEvalPlanInKeyOrder(ctx, tx); err != nil {
			return fmt.Errorf("error planning in key order: %w", err)
		}
		for {
			page, err := q.CreditEvalPlanPage(ctx, tx, params)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil // after the last target
			}
			if err != nil {
				return fmt.Errorf("error planning the targets after %q: %w", params.After, err)
			}
			r, ok := parseKey(page.Chunk)
			if !ok {
				return fmt.Errorf("planned a malformed chunk key %q", page.Chunk)
			}
			keys = append(keys, page.Chunk)
			frozen.targets += page.Targets
			params.After = r.last
		}
	})
	if err != nil {
		return nil, fmt.Errorf("error freezing the plan: %w", err)
	}
	slices.Sort(keys)

	j.mu.Lock()
	j.plan = frozen
	j.mu.Unlock()
	return &batch.Plan{Chunks: keys, Targets: frozen.targets}, nil
}

// doneRanges returns the committed chunks' ranges for CreditEvalPlanPage:
// their first codes, sorted, and for each the greatest last code of the
// ranges up to it (ranges of different executions may nest).
func doneRanges(committed []string) (firsts, lasts []string) {
	var ranges []keyRange
	for _, key := range committed {
		if r, ok := parseKey(key); ok {
			ranges = append(ranges, r)
		}
	}
	slices.SortFunc(ranges, func(a, b keyRange) int { return strings.Compare(a.first, b.first) })
	firsts, lasts = []string{}, []string{}
	for _, r := range ranges {
		last := r.last
		if n := len(lasts); n > 0 && lasts[n-1] > last {
			last = lasts[n-1]
		}
		firsts, lasts = append(firsts, r.first), append(lasts, last)
	}
	return firsts, lasts
}

// declaredTargets returns the targets declared by the execution's plan.
func (j *Job) declaredTargets(executionID int64) (int64, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.plan == nil || j.plan.executionID != executionID {
		return 0, false
	}
	return j.plan.targets, true
}

// Process implements batch.Job: it evaluates the chunk's targets on the
// fan-out, then hands the grades to the checkpoint transaction.
func (j *Job) Process(ctx context.Context, run *batch.Run, chunk string) (*batch.ChunkResult, error) {
	declared, ok := j.declaredTargets(run.ExecutionID)
	if !ok {
		return nil, fmt.Errorf("execution %d has no plan", run.ExecutionID)
	}
	// The chunk's targets as frozen in the plan. A chunk done again (a
	// transient database error made the runner retry it, after some of its
	// grades had committed in parts) calls only the targets with no
	// committed grade, as a resume does.
	targets, err := queries.New().CreditEvalPlanChunk(ctx, run.DB, &queries.CreditEvalPlanChunkParams{
		ExecutionID: run.ExecutionID, Chunk: chunk, InstanceID: run.InstanceID,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("chunk %s is not in the plan of execution %d", chunk, run.ExecutionID)
	}
	if err != nil {
		return nil, fmt.Errorf("error reading the targets of chunk %s: %w", chunk, err)
	}
	// The tolerance is checked as targets fail: the failures committed by
	// earlier chunks, plus this chunk's so far. Past it the fan-out stops
	// handing over targets at once (the calls in flight finish), so a
	// provider answering garbage costs about tolerance + BUILDRISK_FANOUT
	// calls, not one per target.
	prior, err := queries.New().JobCheckpointTotals(ctx, run.DB, run.InstanceID)
	if err != nil {
		return nil, fmt.Errorf("error reading checkpoint totals: %w", err)
	}
	tolerance := FailureTolerance(declared)
	day := run.Calls.Today()
	results, err := batch.FanOutCommit(ctx, run, chunk, targets,
		func(ctx context.Context, corpCode string) (Evaluation, error) {
			return Evaluate(ctx, run.Calls, corpCode, day)
		},
		batch.Committer[string, Evaluation]{
			Key:   func(corpCode string) string { return corpCode },
			Queue: func(b *pgx.Batch, grades []Evaluation) { queueUpsert(ctx, b, run.ExecutionID, day, grades) },
			Failed: func(failed int64, _ error) error {
				if prior.Failed+failed > tolerance {
					return errToleranceExceeded
				}
				return nil
			},
		})
	if errors.Is(err, errToleranceExceeded) {
		// Named with every target that failed in the chunk, those that
		// were in flight when the line was crossed included.
		return nil, failuresError(targets, results, prior.Failed, declared, tolerance)
	}
	if err != nil {
		// Stopped handing over (cap, maxCalls, key, Retry-After, stop or drain): the
		// grades committed so far are kept, the other targets stay for the
		// resume.
		return nil, err
	}

	var failures []error
	uncommitted := 0
	for i, r := range results {
		switch {
		case !r.Done:
			// FanOutCommit hands every item over or returns an error; an
			// item neither processed nor failed must never pass as written.
			return nil, fmt.Errorf("target %s was not processed", targets[i])
		case r.Err != nil:
			failures = append(failures, fmt.Errorf("%s: %w", targets[i], r.Err))
		case !r.Committed:
			uncommitted++
		}
	}
	if uncommitted > 0 {
		// FanOutCommit returns an error when a grade did not commit.
		return nil, fmt.Errorf("%d grades of chunk %s were not committed", uncommitted, chunk)
	}
	if len(failures) > 0 {
		if prior.Failed+int64(len(failures)) > tolerance {
			return nil, failuresError(targets, results, prior.Failed, declared, tolerance)
		}
		// One line per chunk, not one per item.
		run.Logger.WarnContext(ctx, "credit evaluations failed in chunk; counted as failed, repair with a backfill request",
			slog.String("chunk", chunk), slog.Int("failed", len(failures)), slog.String("first_error", failures[0].Error()))
	}

	// Every grade is committed in a part already; the chunk's checkpoint
	// holds its failed targets.
	return &batch.ChunkResult{Targets: int64(len(failures)), Failed: int64(len(failures))}, nil
}

// DomainRows implements batch.DomainRowCounter: the credit_grade rows the
// executions wrote, counted by a query — the second, independent count.
func (j *Job) DomainRows(ctx context.Context, db queries.DBTX, executionIDs []int64) (int64, error) {
	return queries.New().CreditGradeCountByExecutions(ctx, db, executionIDs)
}

// errToleranceExceeded stops a chunk's fan-out once more targets have
// failed than the tolerance; Process turns it into a *FailuresError.
var errToleranceExceeded = errors.New("failure tolerance exceeded")

// failuresError returns the *FailuresError of a chunk whose failed targets
// (results' errors) bring the execution's past its tolerance.
func failuresError(targets []string, results []batch.ItemResult[Evaluation], prior, declared, tolerance int64) *FailuresError {
	var failures []error
	for i, r := range results {
		if r.Done && r.Err != nil {
			failures = append(failures, fmt.Errorf("%s: %w", targets[i], r.Err))
		}
	}
	return &FailuresError{
		Failed: prior + int64(len(failures)), Targets: declared, Tolerance: tolerance,
		InChunk: int64(len(failures)), First: failures[:min(firstErrorsNamed, len(failures))],
	}
}

// FailuresError fails an execution whose failed targets exceed the
// tolerance; it names the first errors. It is a batch.ItemFailures: the
// runner counts the chunk's failed targets.
type FailuresError struct {
	Failed, Targets, Tolerance int64
	// InChunk is how many of the failed targets failed in this chunk.
	InChunk int64
	First   []error
}

var _ batch.ItemFailures = (*FailuresError)(nil)

// FailedItems implements batch.ItemFailures.
func (e *FailuresError) FailedItems() int64 { return e.InChunk }

// Error implements error.
func (e *FailuresError) Error() string {
	first := make([]string, len(e.First))
	for i, err := range e.First {
		first[i] = err.Error()
	}
	return fmt.Sprintf("%d of %d targets failed, more than the %d tolerated (%d%% or %d at most); first errors: %s",
		e.Failed, e.Targets, e.Tolerance, FailureTolerancePercent, FailureToleranceMax, strings.Join(first, "; "))
}

// Evaluation is one company's grade for a day.
type Evaluation struct {
	CorpCode string
	Grade    string
	Outlook  string
	// Source is SourceLookup or SourceFallback.
	Source string
}

// Evaluate asks the lookup for corpCode's grade as of day and, when it
// answers with an empty grade, the fallback crawl. Errors that make every
// further call pointless (daily cap, maxCalls, missing or rejected key, a
// provider's Retry-After past the client's backoff) are wrapped with
// batch.Halt.
func Evaluate(ctx context.Context, calls *upstream.Caller, corpCode string, day time.Time) (Evaluation, error) {
	g, err := ask(ctx, calls, upstream.EndpointCreditLookup, withDate(upstream.CreditLookupQuery(corpCode), day), corpCode)
	if err != nil {
		return Evaluation{}, err
	}
	if g.Grade != "" {
		return Evaluation{CorpCode: corpCode, Grade: g.Grade, Outlook: g.Outlook, Source: SourceLookup}, nil
	}
	g, err = ask(ctx, calls, upstream.EndpointCreditFallback, withDate(upstream.CreditFallbackQuery(corpCode), day), corpCode)
	if err != nil {
		return Evaluation{}, err
	}
	if g.Grade == "" {
		return Evaluation{}, fmt.Errorf("%s: corp code %s: answer without a grade", upstream.EndpointCreditFallback, corpCode)
	}
	return Evaluation{CorpCode: corpCode, Grade: g.Grade, Outlook: g.Outlook, Source: SourceFallback}, nil
}

// withDate asks for the grade as of day (the provider's optional date).
func withDate(q url.Values, day time.Time) url.Values {
	q.Set("date", day.Format("20060102"))
	return q
}

func ask(ctx context.Context, calls *upstream.Caller, ep upstream.Endpoint, q url.Values, corpCode string) (upstream.CreditGrade, error) {
	body, err := calls.Get(ctx, ep, q)
	if err != nil {
		if halts(err) {
			return upstream.CreditGrade{}, batch.Halt(err)
		}
		return upstream.CreditGrade{}, err
	}
	g, err := upstream.ParseCreditGrade(body)
	if err != nil {
		return upstream.CreditGrade{}, err
	}
	if g.CorpCode != corpCode {
		return upstream.CreditGrade{}, fmt.Errorf("%s: asked for corp code %s, answered for %s", ep, corpCode, g.CorpCode)
	}
	return g, nil
}

// halts reports whether err makes every further call of the run pointless:
// a provider that said to come back later (a *upstream.RateLimitedError)
// would only refuse them, each paid for.
func halts(err error) bool {
	if errors.Is(err, upstream.ErrCapped) || errors.Is(err, upstream.ErrMaxCalls) || errors.Is(err, upstream.ErrNoKey) {
		return true
	}
	if _, ok := errors.AsType[*upstream.RateLimitedError](err); ok {
		return true
	}
	var callErr *upstream.CallError
	return errors.As(err, &callErr) && (callErr.Status == http.StatusUnauthorized || callErr.Status == http.StatusForbidden)
}

// queueUpsert queues the upsert of one part's grades on the part's batch.
func queueUpsert(ctx context.Context, b *pgx.Batch, executionID int64, day time.Time, grades []Evaluation) {
	p := &queries.CreditGradeUpsertParams{EvalDate: day, ExecutionID: executionID}
	for _, g := range grades {
		p.CorpCodes = append(p.CorpCodes, g.CorpCode)
		p.Grades = append(p.Grades, g.Grade)
		p.Outlooks = append(p.Outlooks, g.Outlook)
		p.Sources = append(p.Sources, g.Source)
	}
	queries.Queue(b, func(db queries.DBTX) { _, _ = queries.New().CreditGradeUpsert(ctx, db, p) }).
		Exec(func(tag pgconn.CommandTag) error {
			if n := tag.RowsAffected(); n != int64(len(grades)) {
				return fmt.Errorf("upserted %d credit grades, expected %d", n, len(grades))
			}
			return nil
		})
}

// Estimator returns creditEval's call estimate (a request.EstimateFunc):
// EstimateCalls of the targets a run would evaluate now — every
// company with outstanding exposure, or for a backfill those without a
// grade for today (the day of today()).
func Estimator(today func() time.Time) func(ctx context.Context, db queries.DBTX, params *catalog.Params) (int, error) {
	return func(ctx context.Context, db queries.DBTX, params *catalog.Params) (int, error) {
		p, ok := params.Value.(*Params)
		if !ok {
			return 0, fmt.Errorf("creditEval estimate: unexpected params %T", params.Value)
		}
		q := queries.New()
		var n int64
		var err error
		if p.Missing() {
			n, err = q.ExposureTargetCountWithoutGrade(ctx, db, today())
		} else {
			n, err = q.ExposureTargetCount(ctx, db)
		}
		if err != nil {
			return 0, fmt.Errorf("error counting targets: %w", err)
		}
		return EstimateCalls(int(n)), nil
	}
}

// keyRange is a chunk's range of corp codes, both ends included.
type keyRange struct{ first, last string }

// parseKey reads a chunk key "FIRST-LAST".
func parseKey(key string) (keyRange, bool) {
	first, last, ok := strings.Cut(key, "-")
	if !ok || len(first) != 8 || len(last) != 8 || first > last {
		return keyRange{}, false
	}
	return keyRange{first: first, last: last}, true
}

func decode(raw json.RawMessage) (*Params, error) {
	return Spec().Params(raw)
}

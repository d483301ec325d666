package credit

import (
	"context"
	"time"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
)

// Name is the name of the credit evaluation job.
const Name = "creditEval"

// ChunkSize is how many targets one creditEval chunk evaluates. A chunk's
// items commit in parts as they finish, so its size bounds neither what a
// kill repeats nor what a drain keeps; what it costs is its tail: the chunk
// ends only when its last calls do, with the slots emptying one by one,
// about half a call per slot. At FANOUT 64 and 20 ms calls that was 4 % of
// a run with chunks of 1,000 (BENCHMARKS.md); a chunk's memory (its
// results) stays a few hundred kilobytes at 2,000.
const ChunkSize = 2000

// FallbackAllowancePercent is the share of targets, in percent, the call
// estimate adds for fallback calls: a lookup that answers empty costs a
// second call to the crawl. The provider's empty answers run at about 5%;
// the estimate allows twice that, so an ordinary day is not refused
// (40,000 targets → 44,000 calls, under CREDIT's 50,000 cap).
const FallbackAllowancePercent = 10

// Params are creditEval's params. The API names their schema
// CreditEvalParams, after the job.
type Params struct {
	Backfill bool `json:"backfill,omitempty" doc:"re-evaluate only the targets that have no grade for today (repairs a day with failed items); the older name of onlyMissing" example:"false"`
	// OnlyMissing plans only the targets coverage counts as missing today:
	// the same target set as Backfill, under the name every job with a
	// coverage definition shares.
	OnlyMissing bool `json:"onlyMissing,omitempty" doc:"evaluate only the targets /v1/coverage counts as missing for today (companies with outstanding exposure and no grade for today)" example:"false"`
}

// Missing reports whether the run plans only the missing targets.
func (p *Params) Missing() bool { return p.Backfill || p.OnlyMissing }

// EstimateCalls returns the calls of a run over targets companies: one
// lookup each plus the fallback allowance, rounded up.
// A negative count is treated as 0.
func EstimateCalls(targets int) int {
	targets = max(targets, 0)
	allowance := (targets*FallbackAllowancePercent + 99) / 100
	return targets + allowance
}

// Spec defines creditEval: a credit grade for every company with
// outstanding exposure, once a day.
//
// Estimate: targets + FallbackAllowancePercent. Only the database knows
// the targets (the exposure ledger): the catalog answers 0 and the api's
// estimator (Estimator) counts them.
func Spec() *catalog.Spec[Params] {
	return &catalog.Spec[Params]{
		JobName: Name,
		Desc: "Credit grades (CREDIT) for every company with outstanding exposure: one lookup per company, " +
			"and a fallback crawl when the lookup is empty; upserted into credit_grade for today " +
			"(BUILDRISK_TIMEZONE). backfill re-evaluates only the companies without a grade for today.",
		ProviderName:    "CREDIT",
		ChunkDesc:       "1,000 companies, fanned out over BUILDRISK_FANOUT slots (1 call each, 2 when the lookup is empty)",
		ExampleValue:    Params{},
		DefaultSchedule: "0 5 * * *",
		Estimate:        func(*Params) int { return 0 },
		CoverageDef: &catalog.Coverage{
			Targets:     "companies in exposure with outstanding_krw > 0",
			Current:     "a credit_grade row for the eval date (today in BUILDRISK_TIMEZONE)",
			DataDate:    catalog.DayIn,
			OnlyMissing: true,
			Count:       countCreditEvalCoverage,
			Missing:     missingCreditEvalCoverage,
		},
	}
}

// Registration is creditEval as a process registers it: its definition,
// its implementation and its call estimate, which counts the targets in
// the database for the day today returns (Estimator).
func Registration(today func() time.Time) batch.Registration {
	return batch.Registration{Definition: Spec(), Job: New(), Estimate: Estimator(today)}
}

// countCreditEvalCoverage is the job's coverage count (queries/coverage.sql).
func countCreditEvalCoverage(ctx context.Context, db queries.DBTX, day time.Time) (int64, int64, error) {
	row, err := queries.New().CoverageCreditEvalCount(ctx, db, day)
	if err != nil {
		return 0, 0, err
	}
	return row.Targets, row.Current, nil
}

// missingCreditEvalCoverage is the job's missing list (queries/coverage.sql).
func missingCreditEvalCoverage(ctx context.Context, db queries.DBTX, day time.Time, after string, limit int32) ([]string, error) {
	return queries.New().CoverageCreditEvalMissing(ctx, db, &queries.CoverageCreditEvalMissingParams{After: after, DataDate: day, RowLimit: limit})
}

package jobs

// CreditEval is the name of the credit evaluation job.
const CreditEval = "creditEval"

// CreditEvalChunkSize is how many targets one creditEval chunk evaluates.
const CreditEvalChunkSize = 1000

// CreditEvalFallbackAllowancePercent is the share of targets, in percent,
// the call estimate adds for fallback calls: a lookup that answers empty
// costs a second call to the crawl. The provider's empty answers run at
// about 5%; the estimate allows twice that, so an ordinary day is not
// refused (40,000 targets → 44,000 calls, under CREDIT's 50,000 cap).
const CreditEvalFallbackAllowancePercent = 10

// CreditEvalParams are creditEval's params.
type CreditEvalParams struct {
	Backfill bool `json:"backfill,omitempty" doc:"re-evaluate only the targets that have no grade for today (repairs a day with failed items); the older name of onlyMissing" example:"false"`
	// OnlyMissing plans only the targets coverage counts as missing today:
	// the same target set as Backfill, under the name every job with a
	// coverage definition shares.
	OnlyMissing bool `json:"onlyMissing,omitempty" doc:"evaluate only the targets /v1/coverage counts as missing for today (companies with outstanding exposure and no grade for today)" example:"false"`
}

// Missing reports whether the run plans only the missing targets.
func (p *CreditEvalParams) Missing() bool { return p.Backfill || p.OnlyMissing }

// CreditEvalEstimate returns the calls of a run over targets companies: one
// lookup each plus the fallback allowance, rounded up.
// A negative count is treated as 0.
func CreditEvalEstimate(targets int) int {
	targets = max(targets, 0)
	allowance := (targets*CreditEvalFallbackAllowancePercent + 99) / 100
	return targets + allowance
}

// CreditEvalSpec defines creditEval: a credit grade for every company with
// outstanding exposure, once a day.
//
// Estimate: targets + CreditEvalFallbackAllowancePercent. Only the database knows
// the targets (the exposure ledger): the catalog answers 0 and the api's
// estimator (credit.Estimator) counts them.
func CreditEvalSpec() *Spec[CreditEvalParams] {
	return &Spec[CreditEvalParams]{
		JobName: CreditEval,
		Desc: "Credit grades (CREDIT) for every company with outstanding exposure: one lookup per company, " +
			"and a fallback crawl when the lookup is empty; upserted into credit_grade for today " +
			"(BUILDRISK_TIMEZONE). backfill re-evaluates only the companies without a grade for today.",
		ProviderName:    "CREDIT",
		ChunkDesc:       "1,000 companies, fanned out over BUILDRISK_FANOUT slots (1 call each, 2 when the lookup is empty)",
		ExampleValue:    CreditEvalParams{},
		DefaultSchedule: "0 5 * * *",
		Estimate:        func(*CreditEvalParams) int { return 0 },
		CoverageDef: &Coverage{
			Targets:     "companies in exposure with outstanding_krw > 0",
			Current:     "a credit_grade row for the eval date (today in BUILDRISK_TIMEZONE)",
			DataDate:    DayIn,
			OnlyMissing: true,
		},
	}
}

package app

import (
	"time"

	"github.com/buildrisk/radar/jobs"
	"github.com/buildrisk/radar/jobs/apttrade"
	"github.com/buildrisk/radar/jobs/corpcode"
	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/jobs/filing"
	"github.com/buildrisk/radar/jobs/riskmetric"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/jobs/stockprice"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
)

// registrations is the one list of every job buildrisk-radar can run, in
// the order the job list, the CLI's usage and the API show them. A new job
// is one line here (its package's Registration); the catalog, the runner's
// implementations and the enqueuer's estimates all come from this list.
// thresholds are the rules' (env.RuleThresholds) and today the call
// budget's day (BudgetDay), which creditEval's estimate counts targets for.
func registrations(thresholds riskrule.Thresholds, today func() time.Time) []batch.Registration {
	return []batch.Registration{
		corpcode.Registration(),
		filing.Registration(),
		stockprice.Registration(),
		apttrade.Registration(),
		credit.Registration(today),
		riskmetric.Registration(),
		riskrule.Registration(thresholds),
	}
}

// Jobs returns every job this process runs, as configured by env: the
// rules' thresholds, and creditEval's call estimate counting for the call
// budget's day read through db (BudgetDay).
func Jobs(env *Config, db queries.DBTX) []batch.Registration {
	return registrations(env.RuleThresholds, BudgetDay(env, db))
}

// Catalog returns the definitions of every job (Jobs without a
// configuration): what the api, the CLI, the scheduler and the coverage
// read. No definition depends on the configuration, so the list is built
// with no thresholds and no clock, which only the implementations and the
// estimates use.
func Catalog() *jobs.Catalog {
	return batch.Catalog(registrations(nil, nil))
}

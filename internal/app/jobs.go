package app

import (
	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/jobset"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
)

// Jobs returns every job this process runs, as configured by env: the
// rules' thresholds, and creditEval's call estimate counting for the call
// budget's day read through db (BudgetDay).
func Jobs(env *config.Config, db queries.DBTX) []batch.Registration {
	return jobset.Registrations(env.RuleThresholds, BudgetDay(env, db))
}

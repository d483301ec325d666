// Package jobset holds the one list of every job buildrisk-radar can run.
// The catalog (what the api, the CLI, the scheduler and the configuration
// read), the runner's implementations and the enqueuer's estimates all come
// from this list, so a new job is one line here.
package jobset

import (
	"time"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/jobs/apttrade"
	"github.com/buildrisk/radar/jobs/corpcode"
	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/jobs/filing"
	"github.com/buildrisk/radar/jobs/riskmetric"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/jobs/stockprice"
	"github.com/buildrisk/radar/queue/batch"
)

// Registrations returns every job, in the order the job list, the CLI's
// usage and the API show them. thresholds are the rules'
// (BUILDRISK_RULE_*), and today the call budget's day, which creditEval's
// estimate counts targets for.
func Registrations(thresholds riskrule.Thresholds, today func() time.Time) []batch.Registration {
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

// Catalog returns the definitions of every job (Registrations without a
// configuration). No definition depends on the configuration, so the list
// is built with no thresholds and no clock, which only the implementations
// and the estimates use.
func Catalog() *catalog.Catalog {
	return batch.Catalog(Registrations(nil, nil))
}

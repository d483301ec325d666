package app

import (
	"github.com/buildrisk/radar/jobs"
	"github.com/buildrisk/radar/jobs/apttrade"
	"github.com/buildrisk/radar/jobs/corpcode"
	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/jobs/filing"
	"github.com/buildrisk/radar/jobs/riskmetric"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/jobs/stockprice"
)

// Catalog returns every job that buildrisk-radar can run, in the order the
// job list, the CLI's usage and the API show them.
func Catalog() *jobs.Catalog {
	return jobs.NewCatalog(
		corpcode.Spec(),
		filing.Spec(),
		stockprice.Spec(),
		apttrade.Spec(),
		credit.Spec(),
		riskmetric.Spec(),
		riskrule.Spec(),
	)
}

package batch

import (
	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queue/request"
)

// Registration is one job as a process knows it: its definition (the
// catalog's: params, schedule, coverage), its implementation and, when
// its call estimate needs the database, that estimate. Each job package
// exports one constructor of its Registration, and the composition root
// lists them once (internal/app's Jobs); the catalog, the runner's
// implementations and the enqueuer's estimates are all derived from that
// list, so a job cannot be known to one of them and missing from another.
type Registration struct {
	Definition catalog.Definition
	Job        Job
	Estimate   request.EstimateFunc // nil: the definition's own estimate
}

// Catalog returns the definitions of regs, in their order. Panics on a
// duplicate name (jobs.NewCatalog): that is a programming error.
func Catalog(regs []Registration) *catalog.Catalog {
	defs := make([]catalog.Definition, len(regs))
	for i, r := range regs {
		defs[i] = r.Definition
	}
	return catalog.NewCatalog(defs...)
}

// Implementations returns the implementation of each job of regs by name:
// Config.Jobs.
func Implementations(regs []Registration) map[string]Job {
	byName := make(map[string]Job, len(regs))
	for _, r := range regs {
		byName[r.Definition.Name()] = r.Job
	}
	return byName
}

// Estimators returns the estimates of the jobs of regs whose call estimate
// needs the database, by name: request.Config.Estimators.
func Estimators(regs []Registration) map[string]request.EstimateFunc {
	byName := map[string]request.EstimateFunc{}
	for _, r := range regs {
		if r.Estimate != nil {
			byName[r.Definition.Name()] = r.Estimate
		}
	}
	return byName
}

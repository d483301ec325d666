package app

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/buildrisk/radar/internal/config"
)

// Census is what a role built, for the roles' test.
type Census struct {
	RiverClients, Owners int
	OwnerRiver           *river.Client[pgx.Tx]
}

func (c census) export() Census {
	return Census{RiverClients: c.riverClients, Owners: c.owners, OwnerRiver: c.ownerRiver}
}

// NewWorkerCounted is NewWorker with the census of what it built.
func NewWorkerCounted(pool *pgxpool.Pool, env *config.Config, tel *Telemetry, opts WorkerOptions) (*Worker, Census, error) {
	w, built, err := newWorker(pool, env, tel, opts)
	return w, built.export(), err
}

// Built is the census of what NewAPI built.
func (a *API) Built() Census { return a.built.export() }

// Built is the census of what NewCLI built.
func (c *CLI) Built() Census { return c.built.export() }

// The HTTP servers' timeouts and the provider tracing, for their tests.
type ServerTimeouts = serverTimeouts

var (
	ServerTimeoutsDefault = serverTimeoutsDefault
	NewHTTPServer         = newHTTPServer
	ProviderTracing       = providerTracing
)

// ObserveSchedules and ObserveCoverage export the metric sources every
// process registers, for the outage logging test.
var (
	ObserveSchedules = observeSchedules
	ObserveCoverage  = observeCoverage
)

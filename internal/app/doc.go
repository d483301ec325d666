// Package app is radar's composition root: from a Config (the environment,
// read and validated by config.LoadEnv) it builds the pieces every role runs — the
// pools and their session limits, the telemetry, River's clients, the
// enqueuer, the worker and its runner, the api server and the HTTP servers —
// and runs the api and worker roles (RunAPI, RunWorker). cmd/radar parses
// flags and the environment and picks a role; its dev and run commands put
// together the same pieces from this package themselves, and tests build the
// whole system through internal/apptest.
package app

// Version is the running build's version, reported by telemetry, the worker
// registry and the api. cmd/radar sets it from its own -ldflags value.
var Version = "dev"

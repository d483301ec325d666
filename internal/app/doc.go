// Package app is radar's composition root: one constructor per process
// role, each building from the environment's configuration (internal/config)
// the parts that role runs, once, and handing them down as typed fields.
// Every role starts nothing until Start, and its Stop stops all it started
// (lifecycle.go: its parts are one list of River startstop services).
//
//   - NewAPI: the api server on one insert-only River client (River UI reads
//     through it), with the process's request owner (which is also its
//     reaper), the database probe and, when it serves a port, its HTTP
//     server.
//   - NewWorker: the worker (a queue/worker.Worker: its River client, which
//     inserts and works its queues, its request owner on that client and
//     its runner, fenced by the worker's presence) and, when it has an
//     admin address, its admin server.
//   - NewCLI: `radar run`'s presence, one insert-only River client, its
//     request owner and its runner.
//
// RunAPI and RunWorker run the api and worker processes until a signal:
// build, Start, wait, Stop. cmd/radar parses flags and the environment and
// calls these; `radar dev` runs an API and a Worker side by side in one
// process, and tests build the whole system through internal/apptest, on
// the same constructors.
package app

// Version is the running build's version, reported by telemetry, the worker
// registry and the api. cmd/radar sets it from its own -ldflags value.
var Version = "dev"

// Package app is radar's composition root: one constructor per process
// role, each building from the environment's configuration (internal/config)
// the parts that role runs, once, and handing them down as typed fields.
//
//   - NewAPI: the api server on one insert-only River client (River UI reads
//     through it), with the process's one Enqueuer and one Reaper.
//   - NewWorker: the worker (a queue/worker.Worker), its River
//     client, which inserts and works its queues, one Enqueuer on that client,
//     one Reaper, and the runner, fenced by the worker's presence.
//   - NewCLI: `radar run`'s presence, one insert-only River client, one
//     Enqueuer, one Reaper and the runner, built by the same function as the
//     worker's.
//
// RunAPI and RunWorker run the api and worker processes until a signal.
// cmd/radar parses flags and the environment and calls these; `radar dev`
// runs an API and a Worker in one process, and tests build the whole system
// through internal/apptest, on the same constructors.
package app

// Version is the running build's version, reported by telemetry, the worker
// registry and the api. cmd/radar sets it from its own -ldflags value.
var Version = "dev"

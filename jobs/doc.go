// Package jobs is the job catalog of buildrisk-radar: every job's name,
// description, params type and its validation, the external-call estimate,
// the provider it calls, its default schedule and the job that follows it,
// and the River args that carry a request to a worker.
//
// The catalog is pure data and rules. It must not touch the database, HTTP or
// River's client: the api, the CLI and the worker all read it, so a params
// rule lives here exactly once.
package jobs

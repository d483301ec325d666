// Package jobs is the machinery every job of buildrisk-radar is defined
// with: a job's Definition (its name, description, params type and their
// validation, the external-call estimate, the provider it calls, its
// default schedule, the job that follows it and its coverage), the generic
// Spec that implements it, the Catalog of a process's definitions, the
// params helpers several jobs share (strict decoding, field errors, dates,
// corp codes) and the River args that carry a request to a worker.
//
// Each job's own definition lives beside its implementation, in its
// package's spec.go (jobs/apttrade, jobs/credit, ...), and each job is
// registered once, in internal/app's list of jobs.
//
// This package is pure data and rules. It must not touch the database, HTTP
// or River's client: the api, the CLI and the worker all read the
// definitions built on it, and a job's spec.go uses nothing else, so a
// params rule is written once, for all of them.
package catalog

// Package apptest is the whole service in one test, for tests only: a
// private database (sql/pgtest) reached as the application's roles, the
// fake upstream over real HTTP behind a call gate, the api over real HTTP,
// workers on demand, and a span recorder, all built by internal/app as the
// processes build them. New returns the System; its exported fields and
// methods are what the tests of e2e, api, jobs/credit, internal/app
// and cmd/radar need. Production code never imports it.
package apptest

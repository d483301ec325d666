package catalog

import (
	"github.com/riverqueue/river"
)

// RequestArgs are the args of the River job that runs one job request: the
// request's job and the id of the request it runs, written into the args by
// the enqueue that inserts both in one transaction. A job is a definition
// (filings, stock prices...); the River job carries a request of one.
type RequestArgs struct {
	Job       string `json:"job"`
	RequestID int64  `json:"request_id"`
}

// Kind implements river.JobArgs. It must never change once shipped: it is
// stored in river_job rows (and shown by River UI), and a worker runs only
// the kinds it registered. It keeps the name it had when these args were
// called RunArgs.
func (RequestArgs) Kind() string { return "buildrisk_run" }

// InsertOpts implements river.JobArgsWithInsertOpts: a single attempt,
// because a failed execution is recorded and resumed by a new request,
// never retried blindly. River's unique jobs are not used: one active
// request per job is the service's own rule (the job's advisory lock and
// the partial unique index on active requests), and a River unique slot
// would stay taken by a dead worker's job until River's rescuer freed it.
func (RequestArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 1}
}

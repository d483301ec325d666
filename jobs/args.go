package jobs

import (
	"github.com/riverqueue/river"
)

// RunArgs carries one job request to a worker: the job's name and the id of
// its request, written into the args by the enqueue that inserts both in
// one transaction.
type RunArgs struct {
	Job       string `json:"job"`
	RequestID int64  `json:"request_id"`
}

// Kind implements river.JobArgs. It must never change once shipped.
func (RunArgs) Kind() string { return "buildrisk_run" }

// InsertOpts implements river.JobArgsWithInsertOpts: a single attempt,
// because a failed execution is recorded and resumed by a new request,
// never retried blindly. River's unique jobs are not used: one active
// request per job is the service's own rule (the job's advisory lock and
// the partial unique index on active requests), and a River unique slot
// would stay taken by a dead worker's job until River's rescuer freed it.
func (RunArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 1}
}

package jobs

import (
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// RunArgs carries one job request to a worker. The job name alone is the
// unique key, so River refuses a second active job of the same name.
// RequestID is written by the fetch that hands the job to a worker (a
// trigger on river_job, which also claims the request): the enqueue inserts
// the River job in the round trip that reserves the request's id.
type RunArgs struct {
	Job       string `json:"job" river:"unique"`
	RequestID int64  `json:"request_id"`
}

// Kind implements river.JobArgs. It must never change once shipped.
func (RunArgs) Kind() string { return "buildrisk_run" }

// InsertOpts implements river.JobArgsWithInsertOpts: unique by job over the
// active states (running included, completed excluded, so a finished job
// can be requested again at once), and a single attempt, because a failed
// execution is recorded and resumed by a new request, never retried blindly.
func (RunArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		MaxAttempts: 1,
		UniqueOpts: river.UniqueOpts{
			ByArgs: true,
			ByState: []rivertype.JobState{
				rivertype.JobStateAvailable,
				rivertype.JobStatePending,
				rivertype.JobStateRetryable,
				rivertype.JobStateRunning,
				rivertype.JobStateScheduled,
			},
		},
	}
}

package request

import (
	"context"
	"errors"
	"fmt"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/radartype"
)

// ResumeCandidate applies the restart rules (docs/architecture.md): it
// returns the job's newest execution when a new request with paramsHash and
// confirmPurge should resume it, or nil when the request starts a new
// instance. An execution resumes only when it ended STOPPED, FAILED or
// ABANDONED, its params equal the new ones, and neither side carries
// confirmPurge (a confirmation is valid for its own request only).
func ResumeCandidate(ctx context.Context, db queries.DBTX, job, paramsHash string, confirmPurge bool) (*queries.JobExecutionLastByJobRow, error) {
	if confirmPurge {
		return nil, nil
	}
	last, err := queries.New().JobExecutionLastByJob(ctx, db, job)
	if err := queries.Interpret(err); err != nil {
		if errors.Is(err, queries.ErrNotFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("error reading last execution: %w", err)
	}
	if !resumes(last.JobExecution.Status, last.ParamsHash, last.InstanceConfirmPurge, paramsHash) {
		return nil, nil
	}
	return last, nil
}

// resumes is the restart rule on the job's newest execution (its status and
// its instance's params hash and confirmPurge) for a new request with
// paramsHash and no confirmPurge of its own. It is the rule's one copy:
// the enqueue and the automatic resume both apply it.
func resumes(lastStatus, lastParamsHash string, lastConfirmPurge bool, paramsHash string) bool {
	switch radartype.ExecutionStatus(lastStatus) {
	case radartype.ExecutionStopped, radartype.ExecutionFailed, radartype.ExecutionAbandoned:
		return lastParamsHash == paramsHash && !lastConfirmPurge
	default:
		return false
	}
}

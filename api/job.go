package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/forecast"
	"github.com/buildrisk/radar/sql/pgtx"
)

// JobView is one job of GET /v1/jobs.
type JobView struct {
	Name                string            `json:"name"`
	Description         string            `json:"description"`
	Provider            string            `json:"provider"`
	Chunking            string            `json:"chunking"`
	Running             bool              `json:"running" doc:"an execution is STARTING, STARTED or STOPPING"`
	ActiveRequestID     *string           `json:"activeRequestId"`
	LastExecution       *ExecutionSummary `json:"lastExecution" doc:"the newest execution of the newest instance"`
	HeartbeatAgeSeconds *float64          `json:"heartbeatAgeSeconds" doc:"seconds since the running execution's last_updated; null when not running"`
	RequiredKeys        []string          `json:"requiredKeys"`
	KeysConfigured      bool              `json:"keysConfigured" doc:"a live worker reported every required key name"`
	Schedule            *string           `json:"schedule"`
	Next                *time.Time        `json:"next" doc:"the schedule's next due time"`
	LastDueAt           *time.Time        `json:"lastDueAt" doc:"the newest due time the scheduler recorded; null before the first"`
	LastDueOutcome      *string           `json:"lastDueOutcome" enum:"enqueued,deferred,coalesced,missed,failed" doc:"what became of lastDueAt: enqueued (its request), deferred (waits for the active request to end), coalesced (served by a request with the same params), missed (older than the catch-up window), failed (request refused)"`
	LastDueRequestID    *string           `json:"lastDueRequestId" doc:"the request that serves lastDueAt, once there is one"`
	NextJob             *string           `json:"nextJob" doc:"the job a COMPLETED execution chains to"`
	Deadline            *time.Time        `json:"deadline" doc:"when the job's run must be DONE (BUILDRISK_DEADLINE_<JOB>, a time of day in BUILDRISK_TIMEZONE): the first occurrence after the active request was created (a missed one stays shown while that run goes on), or the next one when nothing is active; null when the job has no deadline"`
	ForecastDoneAt      *time.Time        `json:"forecastDoneAt" doc:"when the running execution is forecast to end, from its own measured pace over the last minute, its provider's rate limit, and its daily cap (a run that will reach the cap is forecast past the reset); null when nothing runs or the run has no pace yet"`
	DeadlineStatus      *string           `json:"deadlineStatus" enum:"on-track,at-risk,late" doc:"at-risk: forecastDoneAt is after deadline; late: the active run's deadline passed, or, with nothing active, the newest deadline passed without a DONE run since the one before it; null when the job has no deadline"`
}

// JobListOutput is GET /v1/jobs.
type JobListOutput struct {
	Body struct {
		Jobs []*JobView `json:"jobs"`
	}
}

// JobDetail is GET /v1/jobs/{job}.
type JobDetail struct {
	JobView
	// ParamsSchema is a JSON Schema (2020-12) object: free-form for the
	// document, whatever keywords the job's params need.
	ParamsSchema map[string]any `json:"paramsSchema" doc:"the JSON Schema (2020-12) of the job's params, the params member of the request body"`
	Example      any            `json:"example" doc:"example params"`
}

// JobGetOutput is GET /v1/jobs/{job}.
type JobGetOutput struct {
	Body *JobDetail
}

type jobInput struct {
	Job string `path:"job" doc:"job name"`
}

type jobStopInput struct {
	IdempotencyKeyInput
	Job string `path:"job" doc:"job name"`
}

// JobStopOutput is the 202 of POST /v1/jobs/{job}/stop.
type JobStopOutput struct {
	ReplayedOutput
	Body struct {
		ExecutionID string `json:"executionId"`
		Status      string `json:"status" enum:"STOPPING"`
	}
}

func (s *Server) registerJobs(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "job-list",
		Method:      http.MethodGet,
		Path:        "/v1/jobs",
		Summary:     "List jobs with their last execution and running state",
		Tags:        []string{"jobs"},
		Security:    []map[string][]string{{"bearer": {}}},
	}, func(ctx context.Context, _ *struct{}) (*JobListOutput, error) {
		views, err := s.jobViews(ctx, s.cfg.Catalog.Names())
		if err != nil {
			return nil, s.problemFrom(ctx, err)
		}
		out := &JobListOutput{}
		out.Body.Jobs = views
		return out, nil
	})
	huma.Register(api, huma.Operation{
		OperationID: "job-get",
		Method:      http.MethodGet,
		Path:        "/v1/jobs/{job}",
		Summary:     "Get one job with its params schema",
		Tags:        []string{"jobs"},
		Security:    []map[string][]string{{"bearer": {}}},
		Errors:      []int{http.StatusNotFound},
	}, func(ctx context.Context, in *jobInput) (*JobGetOutput, error) {
		def, ok := s.cfg.Catalog.Lookup(in.Job)
		if !ok {
			return nil, huma.Error404NotFound(fmt.Sprintf("job %s not found", catalog.Quote(in.Job)))
		}
		views, err := s.jobViews(ctx, []string{in.Job})
		if err != nil {
			return nil, s.problemFrom(ctx, err)
		}
		schema, err := paramsSchema(def)
		if err != nil {
			return nil, s.problemFrom(ctx, err)
		}
		return &JobGetOutput{Body: &JobDetail{JobView: *views[0], ParamsSchema: schema, Example: def.Example()}}, nil
	})
	huma.Register(api, huma.Operation{
		OperationID:   "job-stop",
		Method:        http.MethodPost,
		Path:          "/v1/jobs/{job}/stop",
		Summary:       "Stop the job's running execution at its next chunk boundary",
		Description:   "Marks the execution STOPPING (no end time). It becomes STOPPED when the job's goroutine has really ended; until then it counts as running. Safe to retry with an Idempotency-Key.",
		Tags:          []string{"jobs"},
		DefaultStatus: http.StatusAccepted,
		Security:      []map[string][]string{{"bearer": {}}},
		Errors:        []int{http.StatusNotFound, http.StatusConflict},
	}, s.stopJob)
}

// paramsSchema is the JSON Schema of def's params as a plain JSON object.
func paramsSchema(def catalog.Definition) (map[string]any, error) {
	registry := huma.NewMapRegistry("#/components/schemas/", huma.DefaultSchemaNamer)
	raw, err := json.Marshal(registry.Schema(def.ParamsType(), false, ""))
	if err != nil {
		return nil, fmt.Errorf("error encoding the params schema of %s: %w", def.Name(), err)
	}
	var schema map[string]any
	if err := json.Unmarshal(raw, &schema); err != nil {
		return nil, fmt.Errorf("error decoding the params schema of %s: %w", def.Name(), err)
	}
	return schema, nil
}

// jobViews builds the job list with one SQL statement.
func (s *Server) jobViews(ctx context.Context, names []string) ([]*JobView, error) {
	rows, err := s.queries.JobListSummary(ctx, s.reads, &queries.JobListSummaryParams{Jobs: names, StaleSeconds: s.cfg.StaleAfter.Seconds()})
	if err != nil {
		return nil, fmt.Errorf("error listing jobs: %w", err)
	}
	byName := make(map[string]*queries.JobListSummaryRow, len(rows))
	for _, r := range rows {
		byName[r.Job] = r
	}
	views := make([]*JobView, 0, len(names))
	for _, name := range names {
		def, _ := s.cfg.Catalog.Lookup(name)
		view := jobViewFrom(def, byName[name], s.cfg.Schedules)
		if d, ok := s.cfg.Deadlines[name]; ok {
			judgeDeadline(view, d, byName[name], s.cfg.Now())
		}
		views = append(views, view)
	}
	return views, nil
}

// judgeDeadline fills v's deadline figures: the job's deadline d judged
// against its run's forecast at now.
func judgeDeadline(v *JobView, d forecast.Deadline, row *queries.JobListSummaryRow, now time.Time) {
	var figures forecast.Figures
	if row != nil {
		// ForecastDoneAt is the running execution's: none when none runs.
		figures = forecast.Figures{ActiveSince: row.ActiveRequestCreatedAt, ForecastDoneAt: row.ForecastDoneAt, LastCompletedAt: row.LastCompletedAt}
	}
	j := forecast.Judge(d, figures, now)
	status := string(j.Status)
	v.Deadline, v.ForecastDoneAt, v.DeadlineStatus = &j.Deadline, j.ForecastDoneAt, &status
}

func jobViewFrom(def catalog.Definition, row *queries.JobListSummaryRow, schedules func(string) (string, *time.Time)) *JobView {
	v := &JobView{
		Name: def.Name(), Description: def.Description(), Provider: def.Provider(), Chunking: def.Chunking(),
		RequiredKeys: def.RequiredKeys(),
	}
	if next := def.Next(); next != "" {
		v.NextJob = &next
	}
	if schedules != nil {
		if sched, next := schedules(def.Name()); sched != "" {
			v.Schedule, v.Next = &sched, next
		}
	}
	live := map[string]bool{}
	if row != nil {
		for _, k := range row.LiveKeys {
			live[k] = true
		}
		v.Running = row.Running
		v.LastDueAt, v.LastDueOutcome, v.LastDueRequestID = row.LastDueAt, row.LastDueOutcome, formatIDPtr(row.LastDueRequestID)
		v.ActiveRequestID = formatIDPtr(row.ActiveRequestID)
		if row.Running {
			age := row.HeartbeatAgeSeconds
			v.HeartbeatAgeSeconds = &age
		}
		if row.LastExecutionID != nil {
			v.LastExecution = &ExecutionSummary{
				ID: formatID(*row.LastExecutionID), Status: deref(row.LastStatus), StartedAt: row.LastStartedAt,
				EndedAt: row.LastEndedAt, ExitMessage: deref(row.LastExitMessage),
			}
		}
	}
	v.KeysConfigured = true
	for _, k := range v.RequiredKeys {
		if !live[k] {
			v.KeysConfigured = false
		}
	}
	return v
}

func (s *Server) stopJob(ctx context.Context, in *jobStopInput) (*JobStopOutput, error) {
	key, err := s.idempotency(ctx, &in.IdempotencyKeyInput, "POST /v1/jobs/"+in.Job+"/stop", nil)
	if err != nil {
		return nil, err
	}
	if _, ok := s.cfg.Catalog.Lookup(in.Job); !ok {
		return nil, huma.Error404NotFound(fmt.Sprintf("job %s not found", catalog.Quote(in.Job)))
	}
	out := &JobStopOutput{}
	var replay *replayError
	err = pgtx.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		replay = nil
		if key != nil {
			if err := key.begin(ctx, tx); errors.As(err, &replay) {
				return nil
			} else if err != nil {
				return err
			}
		}
		stopped, err := s.queries.JobExecutionRequestStop(ctx, queries.PlanEachCall(tx), in.Job) // finds the job's active execution among its history
		if err := queries.Interpret(err); err != nil {
			return err
		}
		out.Body.ExecutionID = formatID(stopped.ID)
		out.Body.Status = stopped.Status
		if key != nil {
			return key.record(ctx, tx, http.StatusAccepted, out.Body)
		}
		return nil
	})
	switch {
	case errors.Is(err, queries.ErrNotFound):
		return nil, newConflict(ProblemNothingRunning, fmt.Sprintf("job %s has no STARTING or STARTED execution to stop", in.Job), 0)
	case err != nil:
		return nil, s.problemFrom(ctx, err)
	case replay != nil:
		out = &JobStopOutput{ReplayedOutput: ReplayedOutput{Replayed: "true"}}
		if err := replayed(replay, &out.Body); err != nil {
			return nil, s.problemFrom(ctx, err)
		}
		return out, nil
	}
	s.audit(ctx, "", AuditStop, in.Job, "execution "+out.Body.ExecutionID)
	return out, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

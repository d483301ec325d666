package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/radartype"
)

// Request list paging bounds.
const (
	RequestListLimitDefault = 50
	RequestListLimitMax     = 500
)

// RequestCreateOutput is the 202 of POST /v1/jobs/{job}/requests.
type RequestCreateOutput struct {
	ReplayedOutput
	Body struct {
		RequestID          string  `json:"requestId"`
		Job                string  `json:"job"`
		Status             string  `json:"status" enum:"QUEUED"`
		EstimatedCalls     int     `json:"estimatedCalls" doc:"external calls the run is estimated to make: the whole plan's when it starts a new instance; when it resumes one (resumesExecutionId), those of the chunks the instance has left"`
		ResumesExecutionID *string `json:"resumesExecutionId" doc:"the execution this request resumes, or null when it starts a new instance"`
	}
}

// RequestEstimateOutput is POST /v1/jobs/{job}/estimate.
type RequestEstimateOutput struct {
	Body struct {
		Job                string  `json:"job"`
		EstimatedCalls     int     `json:"estimatedCalls" doc:"external calls the run would make if requested now: the whole plan's for a new instance; for a resume (resumesExecutionId), those of the chunks the instance has left"`
		ResumesExecutionID *string `json:"resumesExecutionId" doc:"the execution a request with this body would resume now, or null when it would start a new instance"`
	}
}

// requestCreateBody is the POST body: params are decoded per job.
type requestCreateBody struct {
	Params       json.RawMessage `json:"params"`
	MaxCalls     *int            `json:"maxCalls"`
	ConfirmPurge bool            `json:"confirmPurge"`
}

// documentedBody builds the OpenAPI schema of one job's POST body.
func documentedBody(paramsType reflect.Type) reflect.Type {
	return reflect.StructOf([]reflect.StructField{
		{Name: "Params", Type: paramsType, Tag: `json:"params" doc:"the job's params"`},
		{Name: "MaxCalls", Type: reflect.TypeFor[*int](), Tag: `json:"maxCalls,omitempty" minimum:"1" maximum:"1000000" doc:"cap this execution's external calls, 1 to 1,000,000 (only when you want one)"`},
		{Name: "ConfirmPurge", Type: reflect.TypeFor[bool](), Tag: `json:"confirmPurge,omitempty" doc:"confirms a purge for this request only; such an execution is never resumed"`},
	})
}

type requestCreateJobInput struct {
	IdempotencyKeyInput
	RawBody []byte
}

type requestCreateAnyInput struct {
	IdempotencyKeyInput
	Job     string `path:"job" doc:"job name"`
	RawBody []byte
}

type requestCreateInput struct {
	Job     string `path:"job" doc:"job name"`
	RawBody []byte
}

type requestGetInput struct {
	ID string `path:"id" doc:"request id"`
}

// RequestGetOutput is GET /v1/requests/{id}.
type RequestGetOutput struct {
	Body *RequestView
}

type requestListInput struct {
	Job     string `query:"job" doc:"only this job"`
	Status  string `query:"status" doc:"only this status: QUEUED, RUNNING, DONE or FAILED (a request that was served reads DONE however its run ended: see outcome)"`
	Outcome string `query:"outcome" doc:"only requests whose execution ended so: COMPLETED, STOPPED (an operator's stop, maxCalls, a daily cap, a drain...), FAILED or ABANDONED"`
	Cause   string `query:"cause" doc:"with outcome: only requests whose execution's stop cause is this: drain, reap, database, provider-rate, operator, cap, max_calls or failure"`
	EndedOn string `query:"endedOn" doc:"with outcome: only requests whose execution ended on this day, YYYY-MM-DD or today, in BUILDRISK_TIMEZONE by the database's clock (outcome=STOPPED&endedOn=today: the runs stopped or capped today)"`
	Limit   string `query:"limit" doc:"page size, 1..500 (default 50)"`
	Cursor  string `query:"cursor" doc:"nextCursor of the previous page"`
}

// RequestListOutput is GET /v1/requests.
type RequestListOutput struct {
	Body struct {
		Requests   []*RequestView `json:"requests"`
		NextCursor *string        `json:"nextCursor" doc:"pass as cursor for the next page; null on the last page"`
	}
}

func (s *Server) registerRequests(api huma.API) {
	for _, def := range s.cfg.Catalog.All() {
		path := "/v1/jobs/" + def.Name() + "/requests"
		huma.Register(api, huma.Operation{
			OperationID:   "request-create-" + def.Name(),
			Method:        http.MethodPost,
			Path:          path,
			Summary:       "Request a " + def.Name() + " run",
			Description:   def.Description() + " Chunk: " + def.Chunking() + ". Answers 202 at once; a duplicate gets 409 with the active request id. Safe to retry with an Idempotency-Key.",
			Tags:          []string{"requests"},
			DefaultStatus: http.StatusAccepted,
			Security:      []map[string][]string{{"bearer": {}}},
			Errors:        []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusConflict},
		}, func(ctx context.Context, in *requestCreateJobInput) (*RequestCreateOutput, error) {
			return s.createRequest(ctx, def.Name(), &in.IdempotencyKeyInput, in.RawBody)
		})
		// RawBody registers as an opaque body; document the real JSON shape.
		op := api.OpenAPI().Paths[path].Post
		schema := huma.SchemaFromType(api.OpenAPI().Components.Schemas, documentedBody(def.ParamsType()))
		op.RequestBody = &huma.RequestBody{Required: true, Content: map[string]*huma.MediaType{
			"application/json": {Schema: schema, Example: map[string]any{"params": def.Example()}},
		}}
	}
	huma.Register(api, huma.Operation{
		OperationID:   "request-create",
		Method:        http.MethodPost,
		Path:          "/v1/jobs/{job}/requests",
		Summary:       "Request a run of any job (404 for unknown jobs)",
		Tags:          []string{"requests"},
		DefaultStatus: http.StatusAccepted,
		Security:      []map[string][]string{{"bearer": {}}},
		// A named job's own path takes precedence and answers the same way:
		// a client calling this operation for a known job sees its answers.
		Errors: []int{http.StatusBadRequest, http.StatusNotFound, http.StatusConflict},
	}, func(ctx context.Context, in *requestCreateAnyInput) (*RequestCreateOutput, error) {
		return s.createRequest(ctx, in.Job, &in.IdempotencyKeyInput, in.RawBody)
	})
	documentAnyJobBody(api, "/v1/jobs/{job}/requests")
	huma.Register(api, huma.Operation{
		OperationID: "request-estimate",
		Method:      http.MethodPost,
		Path:        "/v1/jobs/{job}/estimate",
		Summary:     "Estimate a run's external calls without requesting it",
		Description: "Takes the body of POST /v1/jobs/{job}/requests, validates it the same way (400 naming the field, " +
			"including an estimate above the provider's daily cap) and answers the call estimate that request would get now: " +
			"the whole plan's, or, when it would resume a stopped run, that of the chunks left. Writes nothing.",
		Tags:     []string{"requests"},
		Security: []map[string][]string{{"bearer": {}}},
		Errors:   []int{http.StatusBadRequest, http.StatusNotFound},
	}, s.estimateRequest)
	documentAnyJobBody(api, "/v1/jobs/{job}/estimate")
	huma.Register(api, huma.Operation{
		OperationID: "request-get",
		Method:      http.MethodGet,
		Path:        "/v1/requests/{id}",
		Summary:     "Get a request with its execution's progress",
		Tags:        []string{"requests"},
		Security:    []map[string][]string{{"bearer": {}}},
		Errors:      []int{http.StatusBadRequest, http.StatusNotFound},
	}, s.getRequest)
	huma.Register(api, huma.Operation{
		OperationID: "request-list",
		Method:      http.MethodGet,
		Path:        "/v1/requests",
		Summary:     "List requests, newest first",
		Tags:        []string{"requests"},
		Security:    []map[string][]string{{"bearer": {}}},
		Errors:      []int{http.StatusBadRequest},
	}, s.listRequests)
}

// documentAnyJobBody documents the JSON body of the POST at path, an
// operation for any job: params is then any JSON object (GET /v1/jobs/{job}
// gives each job's paramsSchema).
func documentAnyJobBody(api huma.API, path string) {
	op := api.OpenAPI().Paths[path].Post
	schema := huma.SchemaFromType(api.OpenAPI().Components.Schemas, documentedBody(reflect.TypeFor[map[string]any]()))
	op.RequestBody = &huma.RequestBody{Required: true, Content: map[string]*huma.MediaType{
		"application/json": {Schema: schema, Example: map[string]any{"params": map[string]any{"regions": []string{"11110"}, "from": "2025-01", "to": "2025-03"}}},
	}}
}

// decodeRequestBody decodes a request (or estimate) body for job: 404 for an
// unknown job, 400 naming the field for a malformed body.
func (s *Server) decodeRequestBody(ctx context.Context, job string, raw []byte) (*request.EnqueueParams, error) {
	if _, ok := s.cfg.Catalog.Lookup(job); !ok {
		return nil, huma.Error404NotFound(fmt.Sprintf("job %s not found; GET /v1/jobs lists them", catalog.Quote(job)))
	}
	var body requestCreateBody
	if err := catalog.DecodeStrict(raw, &body, "body"); err != nil {
		var pe *catalog.ParamError
		if errors.As(err, &pe) {
			return nil, badInput("request", pe.Field, pe.Field, pe.Message) // already body.<field>
		}
		return nil, s.problemFrom(ctx, err)
	}
	return &request.EnqueueParams{
		Job: job, Params: body.Params, MaxCalls: body.MaxCalls, ConfirmPurge: body.ConfirmPurge,
		Source: radartype.SourceAPI, RequestedBy: callerName(ctx),
	}, nil
}

// createRequest enqueues a request for job. With an Idempotency-Key, a
// kept record of the key answers at once (before the body is validated
// again: the first call's answer stands), and otherwise the key is recorded
// in the enqueue's transaction (enqueueGuard).
func (s *Server) createRequest(ctx context.Context, job string, keyIn *IdempotencyKeyInput, raw []byte) (*RequestCreateOutput, error) {
	key, err := s.idempotency(ctx, keyIn, "POST /v1/jobs/"+job+"/requests", raw)
	if err != nil {
		return nil, err
	}
	if key != nil {
		if out, err := s.replayRequest(ctx, key.lookup(ctx, s.pool)); out != nil || err != nil {
			return out, err
		}
	}
	params, err := s.decodeRequestBody(ctx, job, raw)
	if err != nil {
		// Refused before the enqueuer saw it (an unknown job, a body that is
		// not a request): counted like every refusal. A name the catalog
		// does not hold is counted as "other", so a caller cannot mint
		// series.
		counted := observability.ValueOther
		if _, ok := s.cfg.Catalog.Lookup(job); ok {
			counted = job
		}
		s.cfg.Instruments.RequestRecorded(ctx, counted, radartype.SourceAPI, observability.ResultInvalid)
		return nil, err
	}
	if key != nil {
		params.Guard = &enqueueGuard{key: key, body: func(res *request.EnqueueResult) any { return accepted(job, res).Body }}
	}
	res, err := s.cfg.Requests.Enqueue(ctx, params)
	if out, err := s.replayRequest(ctx, err); out != nil || err != nil {
		return out, err
	}
	out := accepted(job, res)
	s.audit(ctx, "", AuditRequest, job, "request "+out.Body.RequestID)
	return out, nil
}

// accepted is the 202 of res, job's new request.
func accepted(job string, res *request.EnqueueResult) *RequestCreateOutput {
	out := &RequestCreateOutput{}
	out.Body.RequestID = formatID(res.Request.ID)
	out.Body.Job = job
	out.Body.Status = res.Request.Status
	out.Body.EstimatedCalls = res.EstimatedCalls
	out.Body.ResumesExecutionID = formatIDPtr(res.ResumesExecutionID)
	return out
}

// replayRequest answers a create from an Idempotency-Key's record when err
// is its replay, and maps any other error (nil, nil: no error).
func (s *Server) replayRequest(ctx context.Context, err error) (*RequestCreateOutput, error) {
	var replay *replayError
	switch {
	case err == nil:
		return nil, nil
	case errors.As(err, &replay):
		out := &RequestCreateOutput{ReplayedOutput: ReplayedOutput{Replayed: "true"}}
		if err := replayed(replay, &out.Body); err != nil {
			return nil, s.problemFrom(ctx, err)
		}
		return out, nil
	}
	return nil, s.problemFrom(ctx, err)
}

// estimateRequest is the dry run of createRequest: the same decoding and
// validation, then the estimate; no row is written.
func (s *Server) estimateRequest(ctx context.Context, in *requestCreateInput) (*RequestEstimateOutput, error) {
	params, err := s.decodeRequestBody(ctx, in.Job, in.RawBody)
	if err != nil {
		return nil, err
	}
	estimate, err := s.cfg.Requests.Estimate(ctx, s.reads, params)
	if err != nil {
		return nil, s.problemFrom(ctx, err)
	}
	out := &RequestEstimateOutput{}
	out.Body.Job = in.Job
	out.Body.EstimatedCalls = estimate.Calls
	out.Body.ResumesExecutionID = formatIDPtr(estimate.ResumesExecutionID)
	return out, nil
}

func (s *Server) getRequest(ctx context.Context, in *requestGetInput) (*RequestGetOutput, error) {
	id, ok := parseID(in.ID)
	if !ok {
		return nil, badID("id", in.ID)
	}
	// One statement: the request, its execution and its instance's figures.
	// It runs from the connection's statement cache (s.pool, not s.reads):
	// planning it at each call took four fifths of its server time.
	row, err := s.queries.JobRequestView(ctx, s.pool, id)
	if err := queries.Interpret(err); err != nil {
		if errors.Is(err, queries.ErrNotFound) {
			return nil, huma.Error404NotFound(fmt.Sprintf("request %s not found", in.ID))
		}
		return nil, s.problemFrom(ctx, err)
	}
	return &RequestGetOutput{Body: requestViewFromViewRow(row)}, nil
}

// requestStatusList names the request statuses in a refusal:
// "QUEUED, RUNNING, DONE, FAILED".
var requestStatusList = func() string {
	names := make([]string, 0, 4)
	for _, st := range radartype.RequestStatuses() {
		names = append(names, st.String())
	}
	return strings.Join(names, ", ")
}()

// requestPage reads one page of the request list: by their execution's
// outcome (and stop cause) when one is asked for, down the executions of
// that outcome, else down the requests.
func (s *Server) requestPage(ctx context.Context, job string, params *queries.JobRequestListParams, outcome, cause string, endedOn *string) ([]*queries.JobRequest, error) {
	if outcome == "" {
		if job != "" {
			// One job's page goes down the job's index (JobRequestListByJob).
			return s.queries.JobRequestListByJob(ctx, s.reads, &queries.JobRequestListByJobParams{
				Job: job, Status: params.Status, BeforeID: params.BeforeID, MaxRows: params.MaxRows,
			})
		}
		return s.queries.JobRequestList(ctx, s.reads, params)
	}
	byOutcome := &queries.JobRequestListByOutcomeParams{
		Outcome: outcome, Status: params.Status, BeforeID: params.BeforeID, MaxRows: params.MaxRows,
	}
	if job != "" {
		byOutcome.Job = &job
	}
	if cause != "" {
		byOutcome.Cause = &cause
	}
	if endedOn != nil {
		// One day's executions of the outcome, down their (status,
		// ended_at) index; *endedOn is a date, or "" for today.
		var day *string
		if *endedOn != "" {
			day = endedOn
		}
		rows, err := s.queries.JobRequestListByOutcomeEnded(ctx, s.reads, &queries.JobRequestListByOutcomeEndedParams{
			Outcome: outcome, Cause: byOutcome.Cause, Job: byOutcome.Job, Status: params.Status, BeforeID: params.BeforeID,
			MaxRows: params.MaxRows, Tz: s.cfg.Coverage.Location().String(), Day: day,
		})
		if err != nil {
			return nil, err
		}
		requests := make([]*queries.JobRequest, len(rows))
		for i, r := range rows {
			requests[i] = &r.JobRequest
		}
		return requests, nil
	}
	rows, err := s.queries.JobRequestListByOutcome(ctx, s.reads, byOutcome)
	if err != nil {
		return nil, err
	}
	requests := make([]*queries.JobRequest, len(rows))
	for i, r := range rows {
		requests[i] = &r.JobRequest
	}
	return requests, nil
}

// parseEndedOn reads GET /v1/requests's endedOn: "" for today, or the
// date it names; ok is false for anything else.
func parseEndedOn(s string) (string, bool) {
	if s == "today" {
		return "", true
	}
	day, err := time.Parse(time.DateOnly, s)
	if err != nil || day.Year() < 1 {
		return "", false
	}
	return day.Format(time.DateOnly), true
}

// outcomeList and causeList name an execution's outcomes and stop causes
// in a refusal.
var (
	outcomeList = joinNames(radartype.FinalExecutionStatuses())
	causeList   = joinNames(radartype.StopCauses())
)

func joinNames[T ~string](values []T) string {
	names := make([]string, len(values))
	for i, v := range values {
		names[i] = string(v)
	}
	return strings.Join(names, ", ")
}

func (s *Server) listRequests(ctx context.Context, in *requestListInput) (*RequestListOutput, error) {
	params := &queries.JobRequestListParams{MaxRows: RequestListLimitDefault}
	if in.Job != "" {
		if _, ok := s.cfg.Catalog.Lookup(in.Job); !ok {
			return nil, badQuery("job", fmt.Sprintf("unknown job %s", catalog.Quote(in.Job)))
		}
	}
	if in.Status != "" {
		if !radartype.RequestStatus(in.Status).Valid() {
			msg := fmt.Sprintf("%s is not one of %s", catalog.Quote(in.Status), requestStatusList)
			if slices.Contains(radartype.FinalExecutionStatuses(), radartype.ExecutionStatus(in.Status)) {
				msg += fmt.Sprintf("; %s is how an execution ended: filter with outcome=%s", in.Status, in.Status)
			}
			return nil, badQuery("status", msg)
		}
		params.Status = &in.Status
	}
	if in.Outcome != "" && !slices.Contains(radartype.FinalExecutionStatuses(), radartype.ExecutionStatus(in.Outcome)) {
		return nil, badQuery("outcome", fmt.Sprintf("%s is not one of %s", catalog.Quote(in.Outcome), outcomeList))
	}
	if in.Cause != "" {
		if !slices.Contains(radartype.StopCauses(), radartype.StopCause(in.Cause)) {
			return nil, badQuery("cause", fmt.Sprintf("%s is not one of %s", catalog.Quote(in.Cause), causeList))
		}
		if in.Outcome == "" {
			return nil, badQuery("cause", "give the outcome it ended with too (outcome=STOPPED, FAILED or ABANDONED)")
		}
	}
	var endedOn *string
	if in.EndedOn != "" {
		day, ok := parseEndedOn(in.EndedOn)
		if !ok {
			return nil, badQuery("endedOn", fmt.Sprintf("%s is not a day: YYYY-MM-DD or today", catalog.Quote(in.EndedOn)))
		}
		if in.Outcome == "" {
			return nil, badQuery("endedOn", "give the outcome it ended with too (outcome=STOPPED&endedOn=today: the runs stopped or capped today)")
		}
		endedOn = &day
	}
	if in.Limit != "" {
		limit, err := strconv.Atoi(in.Limit)
		if err != nil || strings.TrimLeft(in.Limit, "0123456789") != "" || limit < 1 || limit > RequestListLimitMax {
			return nil, badQuery("limit", fmt.Sprintf("%s is not an integer from 1 to %d", catalog.Quote(in.Limit), RequestListLimitMax))
		}
		params.MaxRows = int32(limit)
	}
	if in.Cursor != "" {
		before, ok := parseID(in.Cursor)
		if !ok {
			return nil, badQuery("cursor", "not a cursor returned by this API")
		}
		params.BeforeID = &before
	}
	rows, err := s.requestPage(ctx, in.Job, params, in.Outcome, in.Cause, endedOn)
	if err != nil {
		return nil, s.problemFrom(ctx, err)
	}
	var execIDs []int64
	for _, r := range rows {
		if r.ExecutionID != nil {
			execIDs = append(execIDs, *r.ExecutionID)
		}
	}
	execs := map[int64]*queries.JobExecution{}
	if len(execIDs) > 0 {
		list, err := s.queries.JobExecutionListByIDs(ctx, s.reads, execIDs)
		if err != nil {
			return nil, s.problemFrom(ctx, err)
		}
		for _, e := range list {
			execs[e.ID] = e
		}
	}
	out := &RequestListOutput{}
	out.Body.Requests = make([]*RequestView, 0, len(rows))
	for _, r := range rows {
		var e *queries.JobExecution
		if r.ExecutionID != nil {
			e = execs[*r.ExecutionID]
		}
		out.Body.Requests = append(out.Body.Requests, requestViewFromRow(r, e))
	}
	if len(rows) == int(params.MaxRows) {
		out.Body.NextCursor = formatIDPtr(&rows[len(rows)-1].ID)
	}
	return out, nil
}

func badQuery(field, msg string) error {
	return badInput("query", field, "query."+field, msg)
}

// badInput is the 400 for every user mistake: the detail and the error's
// location name the field (body.params.from, query.limit).
func badInput(what, field, location, msg string) error {
	return huma.Error400BadRequest(fmt.Sprintf("invalid %s: %s: %s", what, field, msg), &huma.ErrorDetail{Location: location, Message: msg})
}

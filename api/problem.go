package api

import (
	"encoding/json"
	"html/template"
	"net/http"
	"reflect"
	"strings"

	"github.com/danielgtaylor/huma/v2"
)

// ProblemType is the type of an error answer: every error this API answers
// is an RFC 9457 problem (application/problem+json) whose type names its
// kind, one of the closed set problemKinds lists, so that a client branches
// on type and never on the words of detail. The OpenAPI document gives the
// set as the enum of ErrorModel.type (ConflictError.type: the 409 kinds).
//
// A type is a relative URI reference with the full path, /problems/<name>.
// RFC 9457 allows one, resolved against the answer's URL: there it is this
// api's own page about the kind (registerProblems serves it), so following
// it leads to the documentation of the deployment that answered. And it is
// the same string on every deployment: a client compares type as it was
// sent, with no base URL to configure or know, and the project needs no
// domain of its own to mint it.
type ProblemType string

// problemsPath is where the problem types' pages are served; every type
// starts with it.
const problemsPath = "/problems/"

// The problem types. The name after /problems/ is the kind's; a client may
// compare either the whole type or its last segment.
const (
	ProblemInvalidParams            ProblemType = problemsPath + "invalid-params"
	ProblemCapExceeded              ProblemType = problemsPath + "cap-exceeded"
	ProblemBodyNotAllowed           ProblemType = problemsPath + "body-not-allowed"
	ProblemUnauthorized             ProblemType = problemsPath + "unauthorized"
	ProblemForbidden                ProblemType = problemsPath + "forbidden"
	ProblemNotFound                 ProblemType = problemsPath + "not-found"
	ProblemDuplicateActiveRequest   ProblemType = problemsPath + "duplicate-active-request"
	ProblemNothingRunning           ProblemType = problemsPath + "nothing-running"
	ProblemExecutionNotActive       ProblemType = problemsPath + "execution-not-active"
	ProblemWorkerAlive              ProblemType = problemsPath + "worker-alive"
	ProblemIdempotencyKeyInProgress ProblemType = problemsPath + "idempotency-key-in-progress"
	ProblemBodyTooLarge             ProblemType = problemsPath + "body-too-large"
	ProblemUnsupportedMediaType     ProblemType = problemsPath + "unsupported-media-type"
	ProblemMisdirectedRequest       ProblemType = problemsPath + "misdirected-request"
	ProblemIdempotencyKeyReused     ProblemType = problemsPath + "idempotency-key-reused"
	ProblemTooManyAuthFailures      ProblemType = problemsPath + "too-many-auth-failures"
	ProblemRateLimited              ProblemType = problemsPath + "rate-limited"
	ProblemClientClosedRequest      ProblemType = problemsPath + "client-closed-request"
	ProblemInternalError            ProblemType = problemsPath + "internal-error"
	ProblemDatabaseUnavailable      ProblemType = problemsPath + "database-unavailable"
)

// Name is the kind's name, the type's last path segment.
func (t ProblemType) Name() string { return strings.TrimPrefix(string(t), problemsPath) }

// problemKind documents one problem type: its status, its title (the same
// for every answer of the kind, as RFC 9457 asks) and what it means.
type problemKind struct {
	Type   ProblemType
	Status int
	Title  string
	Doc    string
}

// problemKinds is the closed set of problem types, in status order: every
// error answer's type is one of them (TestProblemTypes_ClosedSet), and
// README's table lists exactly these.
var problemKinds = []problemKind{
	{ProblemInvalidParams, http.StatusBadRequest, "Invalid parameters",
		"A body member, query or path parameter or header is not valid (or the body is not JSON, or repeats a key); errors[].location names each (body.params.from, query.limit, header.Idempotency-Key). Nothing was written: fix the input and send it again."},
	{ProblemCapExceeded, http.StatusBadRequest, "Over the provider's daily cap",
		"The run's estimated calls exceed its provider's whole daily cap (BUILDRISK_DAILY_CAP_<P>): no day could serve it. errors[].location is body.params. Nothing was written: give maxCalls (at most the cap) to run it a day's budget at a time, or split the request into smaller ones."},
	{ProblemBodyNotAllowed, http.StatusBadRequest, "Body not allowed",
		"A GET or HEAD carried a body. It was not read and the connection closes: send the request without one."},
	{ProblemUnauthorized, http.StatusUnauthorized, "Unauthorized",
		"No valid bearer token (Authorization: Bearer TOKEN) or console session. The answer carries WWW-Authenticate."},
	{ProblemForbidden, http.StatusForbidden, "Forbidden",
		"The caller may not do this: a viewer's POST, the audit trail without an operator token, a cross-origin or CSRF-less console call, or a write through River UI."},
	{ProblemNotFound, http.StatusNotFound, "Not found",
		"The job, request, execution or coverage definition the path names does not exist."},
	{ProblemDuplicateActiveRequest, http.StatusConflict, "Duplicate active request",
		"The job already has an active (QUEUED or RUNNING) request; activeRequestId names it. Follow that request (GET /v1/requests/{id}) or request again once it has ended."},
	{ProblemNothingRunning, http.StatusConflict, "Nothing running",
		"A stop found no STARTING or STARTED execution of the job: it has not started yet, or has already ended (or is already STOPPING)."},
	{ProblemExecutionNotActive, http.StatusConflict, "Execution not active",
		"An abandon found the execution already ended (COMPLETED, STOPPED, FAILED or ABANDONED): there is nothing to abandon."},
	{ProblemWorkerAlive, http.StatusConflict, "Worker alive",
		"An abandon found the execution's worker still heartbeating: abandoning its run would let a resume overlap it. Stop the run instead, or wait for the heartbeat to go stale (BUILDRISK_STALE_AFTER)."},
	{ProblemIdempotencyKeyInProgress, http.StatusConflict, "Idempotency key in progress",
		"A call with the same Idempotency-Key is still being processed. Retry after a moment: once it has ended, the retry is answered with its result (Idempotent-Replayed: true)."},
	{ProblemBodyTooLarge, http.StatusRequestEntityTooLarge, "Body too large",
		"The request body is over BUILDRISK_MAX_BODY_BYTES; it was not read."},
	{ProblemUnsupportedMediaType, http.StatusUnsupportedMediaType, "Unsupported media type",
		"A /v1 body must be sent as application/json."},
	{ProblemMisdirectedRequest, http.StatusMisdirectedRequest, "Misdirected request",
		"The request's Host is not one this api answers for (BUILDRISK_ALLOWED_HOSTS): a DNS rebinding or a wrong name. Use one of the api's configured names."},
	{ProblemIdempotencyKeyReused, http.StatusUnprocessableEntity, "Idempotency key reused",
		"The Idempotency-Key was used, within its retention (BUILDRISK_IDEMPOTENCY_RETENTION), for another request: another operation, path or body. Nothing was done: use a new key for a new request."},
	{ProblemTooManyAuthFailures, http.StatusTooManyRequests, "Too many failed credential checks",
		"Too many wrong tokens or logins came from this client, or from all clients together; a wrong credential is refused until Retry-After seconds have passed (a right one never is)."},
	{ProblemRateLimited, http.StatusTooManyRequests, "Rate limited",
		"This token spent its budget of requests per minute (BUILDRISK_TOKEN_RATE_LIMIT; each token has its own, so one client's flood never slows another's). Retry after Retry-After seconds; RateLimit-Policy and RateLimit (IETF draft) give the budget and what is left."},
	{ProblemClientClosedRequest, 499, "Client closed request",
		"The client went away before the answer (only ever seen in logs and traces)."},
	{ProblemInternalError, http.StatusInternalServerError, "Internal error",
		"An unexpected error; the server's log has its cause. Nothing internal is shown here."},
	{ProblemDatabaseUnavailable, http.StatusServiceUnavailable, "Database unavailable",
		"The database is restarting, out of connections, or a statement or lock timed out. Retry after Retry-After seconds: nothing was done."},
}

// ProblemTypes returns the closed set of problem types, in status order.
func ProblemTypes() []ProblemType {
	types := make([]ProblemType, len(problemKinds))
	for i, k := range problemKinds {
		types[i] = k.Type
	}
	return types
}

// Status is the HTTP status of t's answers; 0 for a type not of the set.
func (t ProblemType) Status() int {
	for _, k := range problemKinds {
		if k.Type == t {
			return k.Status
		}
	}
	return 0
}

// problemKindOf returns t's kind.
func problemKindOf(t ProblemType) problemKind {
	for _, k := range problemKinds {
		if k.Type == t {
			return k
		}
	}
	panic("api: unknown problem type " + string(t)) // every caller names a constant above
}

// problemTypeFor is the type of a problem made only from its status: the
// errors Huma raises itself (a body it cannot read, a parameter of the
// wrong type) and the huma.ErrorXxx helpers this package calls for the
// kinds that have one status.
func problemTypeFor(status int) ProblemType {
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return ProblemInvalidParams
	case http.StatusUnauthorized:
		return ProblemUnauthorized
	case http.StatusForbidden:
		return ProblemForbidden
	case http.StatusNotFound:
		return ProblemNotFound
	case http.StatusRequestEntityTooLarge:
		return ProblemBodyTooLarge
	case http.StatusUnsupportedMediaType:
		return ProblemUnsupportedMediaType
	case http.StatusTooManyRequests:
		return ProblemTooManyAuthFailures
	case 499:
		return ProblemClientClosedRequest
	case http.StatusServiceUnavailable:
		return ProblemDatabaseUnavailable
	}
	return ProblemInternalError
}

// Problem is the body of every error answer: RFC 9457's members, with type
// always one of problemKinds, and one entry of errors per bad input.
type Problem struct {
	Type   ProblemType         `json:"type" format:"uri-reference" doc:"The kind of problem, one of a closed set: a relative URI reference (/problems/<name>) that is also this api's page about the kind. Branch on it, not on detail."`
	Title  string              `json:"title" doc:"A short summary of the problem type, the same for every answer of the kind."`
	Status int                 `json:"status" doc:"The HTTP status code."`
	Detail string              `json:"detail,omitempty" doc:"A human-readable explanation of this occurrence."`
	Errors []*huma.ErrorDetail `json:"errors,omitempty" doc:"One entry per bad input: where (location, e.g. body.params.from or header.Idempotency-Key) and what is wrong with it."`
}

// newProblem returns the problem of kind t.
func newProblem(t ProblemType, detail string, errs ...*huma.ErrorDetail) *Problem {
	k := problemKindOf(t)
	return &Problem{Type: t, Title: k.Title, Status: k.Status, Detail: detail, Errors: errs}
}

// Error implements error: the problem's detail.
func (p *Problem) Error() string { return p.Detail }

// GetStatus implements huma.StatusError.
func (p *Problem) GetStatus() int { return p.Status }

// ContentType implements huma.ContentTypeFilter.
func (p *Problem) ContentType(string) string { return "application/problem+json" }

func init() {
	// Every error Huma writes is a Problem (huma.NewError is process-global:
	// set once here). Huma answers schema violations with 422; the contract
	// promises 400 for every bad input, and keeps 422 for a reused
	// Idempotency-Key.
	huma.NewError = func(status int, msg string, errs ...error) huma.StatusError {
		if status == http.StatusUnprocessableEntity {
			status = http.StatusBadRequest
		}
		t := problemTypeFor(status)
		p := &Problem{Type: t, Title: problemKindOf(t).Title, Status: status, Detail: msg}
		for _, err := range errs {
			if err == nil {
				continue
			}
			if d, ok := err.(huma.ErrorDetailer); ok {
				p.Errors = append(p.Errors, d.ErrorDetail())
			} else {
				p.Errors = append(p.Errors, &huma.ErrorDetail{Message: err.Error()})
			}
		}
		return p
	}
}

// ConflictError is the 409 problem: a Problem of one of the 409 kinds plus,
// for duplicate-active-request, activeRequestId.
type ConflictError struct {
	Problem
	ActiveRequestID string `json:"activeRequestId,omitempty" doc:"the job's active (QUEUED or RUNNING) request, when type is duplicate-active-request"`
}

func newConflict(t ProblemType, detail string, activeRequestID int64) *ConflictError {
	e := &ConflictError{Problem: *newProblem(t, detail)}
	if activeRequestID != 0 {
		e.ActiveRequestID = formatID(activeRequestID)
	}
	return e
}

// writeProblem answers a problem of kind t outside Huma (the middlewares:
// auth, body limit, content type).
func writeProblem(w http.ResponseWriter, t ProblemType, detail string, errs ...*huma.ErrorDetail) {
	p := newProblem(t, detail, errs...)
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// documentProblemTypes lists the closed set in the document: the enum of
// ErrorModel.type, and of ConflictError.type the 409 kinds alone.
func documentProblemTypes(oapi *huma.OpenAPI) {
	schemas := oapi.Components.Schemas.Map()
	enum := func(keep func(status int) bool) []any {
		var types []any
		for _, t := range ProblemTypes() {
			if keep(t.Status()) {
				types = append(types, string(t))
			}
		}
		return types
	}
	if s := schemas[problemSchemaName]; s != nil && s.Properties["type"] != nil {
		s.Properties["type"].Enum = enum(func(int) bool { return true })
	}
	if s := schemas["ConflictError"]; s != nil && s.Properties["type"] != nil {
		s.Properties["type"].Enum = enum(func(status int) bool { return status == http.StatusConflict })
	}
}

// problemSchemaName is Problem's component name: ErrorModel, the name Huma
// gave the problem schema before the types existed, which generated clients
// have named their type after.
const problemSchemaName = "ErrorModel"

// problemType is Problem's Go type, named problemSchemaName by schemaNamer.
var problemType = reflect.TypeFor[Problem]()

// problemPage is the page of one problem type, and problemIndex the list of
// them all: what a type's URL shows a developer who follows it.
var (
	problemPage = template.Must(template.New("problem").Parse(problemHead + `<title>{{.Title}} — buildrisk-radar problem type</title></head>
  <body>
    <header><h1>buildrisk-radar problem type</h1><nav><a href="/problems/">Every problem type</a><a href="/docs">API reference</a></nav></header>
    <main><section>
      <h2>{{.Title}}</h2>
      <p><code>type: {{.Type}}</code> · <code>status: {{.Status}}</code></p>
      <p>{{.Doc}}</p>
    </section></main>
  </body>
</html>
`))
	problemIndex = template.Must(template.New("problems").Parse(problemHead + `<title>buildrisk-radar problem types</title></head>
  <body>
    <header><h1>buildrisk-radar problem types</h1><nav><a href="/docs">API reference</a></nav></header>
    <main><section>
      <h2>Problem types</h2>
      <p>Every error answer of the API is application/problem+json whose <code>type</code> is one of these.</p>
      <div class="scroll"><table>
        <tr><th>type</th><th>status</th><th>title</th></tr>
        {{range .}}<tr><td><a href="{{.Type}}"><code>{{.Type}}</code></a></td><td>{{.Status}}</td><td>{{.Title}}</td></tr>
        {{end}}
      </table></div>
    </section></main>
  </body>
</html>
`))
)

// problemHead opens a problem page: the console's stylesheet and icon, so
// that a developer who follows a type lands on a page of the same site.
const problemHead = `<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8">
    <meta name="viewport" content="width=device-width, initial-scale=1">
    <link rel="stylesheet" href="/static/console.css">
    <link rel="icon" href="/favicon.ico">
    `

// problemCSP allows a problem page its stylesheet and icon, from this api
// only, and nothing else.
const problemCSP = "default-src 'none'; style-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'"

// registerProblems serves each problem type's page at its type (and the
// list at /problems/), open like the document: a type is its own
// documentation.
func (s *Server) registerProblems() {
	page := func(w http.ResponseWriter, tmpl *template.Template, data any) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", problemCSP)
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_ = tmpl.Execute(w, data)
	}
	s.mux.HandleFunc("GET "+problemsPath+"{$}", func(w http.ResponseWriter, _ *http.Request) { page(w, problemIndex, problemKinds) })
	s.mux.Handle("GET /problems", http.RedirectHandler(problemsPath, http.StatusMovedPermanently))
	s.mux.HandleFunc("GET "+problemsPath+"{name}", func(w http.ResponseWriter, r *http.Request) {
		for _, k := range problemKinds {
			if k.Type.Name() == r.PathValue("name") {
				page(w, problemPage, k)
				return
			}
		}
		http.NotFound(w, r)
	})
}

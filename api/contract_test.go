package api_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/internal/jobset"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/api"
	"github.com/buildrisk/radar/queries/testfactory"
)

// contract validates every exchange with a running system against the
// OpenAPI document that system serves, strictly: each request the test
// means to be valid, and every response (status documented, headers, body
// with kin-openapi's JSON Schema 2020-12 validation, every error reported).
// It also records which (operation, status) pairs were seen, so the test
// can require that every documented answer was driven.
type contract struct {
	t      *testing.T
	base   string
	doc    *openapi3.T
	router routers.Router

	mu         sync.Mutex
	violations []string
	checked    int
	seen       map[string]map[string]bool // operationId -> status -> seen
	// problemTypes are the problem types the answers carried.
	problemTypes map[string]bool

	// strict validates every answer again under JSON Schema 2020-12 alone
	// (santhosh-tekuri/jsonschema), as strict validators and generated
	// clients read the document: kin-openapi tolerates an enum that lacks
	// the null its type allows, they do not. schemas caches its compiled
	// response schemas by JSON pointer.
	strict  *jsonschema.Compiler
	schemas map[string]*jsonschema.Schema
}

// strictDocURL names the served document as the strict validator's
// resource.
const strictDocURL = "https://radar.test/openapi.json"

func newContract(t *testing.T, base string) *contract {
	t.Helper()
	resp, err := http.Get(base + "/openapi.json")
	require.NoError(t, err)
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	c := &contract{t: t, base: base, seen: map[string]map[string]bool{}, problemTypes: map[string]bool{}, schemas: map[string]*jsonschema.Schema{}}
	strictDoc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	require.NoError(t, err)
	c.strict = jsonschema.NewCompiler()
	c.strict.DefaultDraft(jsonschema.Draft2020)
	require.NoError(t, c.strict.AddResource(strictDocURL, strictDoc))
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	require.NoError(t, err, "the served document does not load")
	if err := doc.Validate(context.Background()); err != nil {
		c.violations = append(c.violations, "document: "+err.Error())
	}
	// Route against the test server, whatever servers the document lists.
	doc.Servers = openapi3.Servers{{URL: base}}
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)
	c.doc, c.router = doc, router
	return c
}

// exchange is one call the test makes.
type exchange struct {
	method, path, token, body string
	// contentType, when set, is sent instead of application/json.
	contentType string
	// contentLength, when set, is sent instead of the body's length (a
	// body over the limit is refused by its announced length).
	contentLength int64
	// host, when set, is sent as the Host header.
	host string
	// invalid marks a request the test means to break the document's
	// rules (bad params, no token, a body over the limit): only its
	// answer is validated.
	invalid bool
	want    int
	// key, when set, is sent as the Idempotency-Key header.
	key string
	// replayed is the Idempotent-Replayed header the answer must carry
	// ("" for none).
	replayed string
}

// do sends e, validates request and response, requires the wanted status
// and returns the decoded body.
func (c *contract) Do(e exchange) map[string]any {
	c.t.Helper()
	req, err := http.NewRequest(e.method, c.base+e.path, strings.NewReader(e.body))
	require.NoError(c.t, err)
	if e.body == "" {
		req.Body, req.ContentLength = http.NoBody, 0
	} else {
		req.Header.Set("Content-Type", cmp.Or(e.contentType, "application/json"))
	}
	if e.contentLength > 0 {
		req.ContentLength = e.contentLength
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	if e.host != "" {
		req.Host = e.host
	}
	if e.key != "" {
		req.Header.Set(api.IdempotencyKeyHeader, e.key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(c.t, err)
	require.Equal(c.t, e.want, resp.StatusCode, "%s %s: %s", e.method, e.path, raw)
	require.Equal(c.t, e.replayed, resp.Header.Get(api.IdempotentReplayedHeader), "%s %s: %s", e.method, e.path, raw)

	c.validate(e, req, resp, raw)
	var out map[string]any
	if len(bytes.TrimSpace(raw)) > 0 {
		_ = json.Unmarshal(raw, &out)
	}
	return out
}

func (c *contract) validate(e exchange, req *http.Request, resp *http.Response, raw []byte) {
	where := fmt.Sprintf("%s %s -> %d", e.method, e.path, resp.StatusCode)
	if resp.StatusCode >= 400 {
		c.checkProblemType(where, resp, raw)
	}
	for _, o := range offsetDateTimes(raw) {
		c.violate(where, "a date-time with an offset (every answer is UTC, Z): "+o)
	}
	// A fresh request for the validator: the sent one's body is consumed.
	vreq, err := http.NewRequest(e.method, c.base+e.path, strings.NewReader(e.body))
	require.NoError(c.t, err)
	vreq.Header = req.Header.Clone()
	route, pathParams, err := c.router.FindRoute(vreq)
	if err != nil {
		c.violate(where, "no documented operation: "+err.Error())
		return
	}
	c.check(e, where, vreq, resp, raw, route, pathParams)
	// A request for a named job matches its own operation first, and
	// request-create too: a client generated from the document may call
	// either, so the answer must match both.
	if parts := strings.Split(strings.TrimPrefix(route.Path, "/"), "/"); route.Method == http.MethodPost &&
		len(parts) == 4 && parts[0] == "v1" && parts[1] == "jobs" && parts[3] == "requests" && parts[2] != "{job}" {
		generic := c.doc.Paths.Value("/v1/jobs/{job}/requests")
		if generic == nil || generic.Post == nil {
			c.violate(where, "no request-create operation")
			return
		}
		greq, err := http.NewRequest(e.method, c.base+e.path, strings.NewReader(e.body))
		require.NoError(c.t, err)
		greq.Header = req.Header.Clone()
		c.check(e, where, greq, resp, raw, &routers.Route{Spec: c.doc, Server: route.Server, Path: "/v1/jobs/{job}/requests",
			PathItem: generic, Method: http.MethodPost, Operation: generic.Post}, map[string]string{"job": parts[2]})
	}
}

// check validates one exchange against one operation.
func (c *contract) check(e exchange, where string, vreq *http.Request, resp *http.Response, raw []byte, route *routers.Route, pathParams map[string]string) {
	c.mu.Lock()
	if c.seen[route.Operation.OperationID] == nil {
		c.seen[route.Operation.OperationID] = map[string]bool{}
	}
	c.seen[route.Operation.OperationID][strconv.Itoa(resp.StatusCode)] = true
	c.checked++
	c.mu.Unlock()
	where += " (" + route.Operation.OperationID + ")"

	opts := &openapi3filter.Options{
		MultiError:            true,
		IncludeResponseStatus: true,
		AuthenticationFunc: func(_ context.Context, in *openapi3filter.AuthenticationInput) error {
			if !strings.HasPrefix(in.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ") {
				return fmt.Errorf("no bearer token")
			}
			return nil
		},
	}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: pathParams, Route: route, Options: opts}
	if !e.invalid {
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			c.violate(where, "request: "+flatten(err))
		}
	}
	rin := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                opts,
	}
	rin.SetBodyBytes(raw)
	if err := openapi3filter.ValidateResponse(context.Background(), rin); err != nil {
		c.violate(where, "response: "+flatten(err)+"\n      body: "+truncate(string(raw), 300))
	}
	c.checkStrict(where, route, resp, raw)
}

// checkStrict validates a JSON answer against its documented schema under
// JSON Schema 2020-12 (see contract.strict).
func (c *contract) checkStrict(where string, route *routers.Route, resp *http.Response, raw []byte) {
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if len(raw) == 0 || !strings.HasSuffix(mediaType, "json") {
		return
	}
	status := strconv.Itoa(resp.StatusCode)
	if route.Operation.Responses.Value(status) == nil {
		status = "default"
	}
	escape := strings.NewReplacer("~", "~0", "/", "~1").Replace
	pointer := fmt.Sprintf("%s#/paths/%s/%s/responses/%s/content/%s/schema",
		strictDocURL, escape(route.Path), strings.ToLower(route.Method), status, escape(mediaType))
	c.mu.Lock()
	schema, ok := c.schemas[pointer]
	if !ok {
		var err error
		if schema, err = c.strict.Compile(pointer); err != nil {
			schema = nil
			c.violations = append(c.violations, where+": strict: no schema at "+pointer+": "+err.Error())
		}
		c.schemas[pointer] = schema
	}
	c.mu.Unlock()
	if schema == nil {
		return
	}
	body, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		c.violate(where, "strict: the body is not JSON: "+err.Error())
		return
	}
	if err := schema.Validate(body); err != nil {
		c.violate(where, "strict (JSON Schema 2020-12): "+err.Error()+"\n      body: "+truncate(string(raw), 300))
	}
}

// checkProblemType requires of an error answer a problem body whose type
// is one of the closed set the document lists (the enum of ErrorModel.type),
// and, for a 409, of ConflictError.type.
func (c *contract) checkProblemType(where string, resp *http.Response, raw []byte) {
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		c.violate(where, "an error answer is "+ct+", not application/problem+json")
		return
	}
	var problem struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(raw, &problem); err != nil || problem.Type == nil {
		c.violate(where, "a problem without type: "+truncate(string(raw), 300))
		return
	}
	schema := "ErrorModel"
	if resp.StatusCode == http.StatusConflict {
		schema = "ConflictError"
	}
	ref := c.doc.Components.Schemas[schema]
	if ref == nil || ref.Value == nil || ref.Value.Properties["type"] == nil {
		c.violate(where, "the document has no "+schema+".type")
		return
	}
	if !slices.Contains(ref.Value.Properties["type"].Value.Enum, any(*problem.Type)) {
		c.violate(where, fmt.Sprintf("problem type %q is not one of %s.type's enum", *problem.Type, schema))
	}
	c.mu.Lock()
	c.problemTypes[*problem.Type] = true
	c.mu.Unlock()
}

func (c *contract) violate(where, what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.violations = append(c.violations, where+": "+what)
}

// flatten lists every error of a (multi-)error, one per line.
func flatten(err error) string {
	var parts []string
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case openapi3.MultiError:
			for _, sub := range e {
				walk(sub)
			}
		case *openapi3filter.ResponseError:
			if e.Err != nil {
				walk(e.Err)
				return
			}
			parts = append(parts, e.Error())
		case *openapi3filter.RequestError:
			if e.Err != nil {
				walk(e.Err)
				return
			}
			parts = append(parts, e.Error())
		case *openapi3.SchemaError:
			if e.Origin != nil {
				walk(e.Origin)
				return
			}
			parts = append(parts, fmt.Sprintf("at /%s: %s", strings.Join(e.JSONPointer(), "/"), e.Reason))
		default:
			parts = append(parts, strings.ReplaceAll(err.Error(), "\n", " "))
		}
	}
	walk(err)
	return strings.Join(parts, "\n      ")
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// unseen lists the documented (operation, status) pairs no exchange drove.
// A 500 is an internal error the service never answers on purpose.
func (c *contract) unseen() []string {
	var missing []string
	for path, item := range c.doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				if status == "500" || status == "default" {
					continue
				}
				if !c.seen[op.OperationID][status] {
					missing = append(missing, fmt.Sprintf("%s %s (%s) %s", method, path, op.OperationID, status))
				}
			}
		}
	}
	sort.Strings(missing)
	return missing
}

// The served OpenAPI document tells the truth: every operation, driven to
// its success and to each error it documents against a real system, answers
// exactly what the document says (kin-openapi's openapi3filter, strict), and
// every answer the document lists is one the test has seen.
func TestContract_EveryOperationMatchesTheDocument(t *testing.T) {
	t.Parallel()
	// Coverage counted at every call, so the locked database answers 503.
	// The api answers for the test server's address only (421 otherwise).
	// A schedule on, so the job list carries a next due time.
	env := map[string]string{"BUILDRISK_COVERAGE_MAX_AGE": "1ms", "BUILDRISK_ALLOWED_HOSTS": "127.0.0.1"}
	maps.Copy(env, apptest.UnavailableEnv)
	maps.Copy(env, scheduledEnv)
	s := apptest.New(t, &apptest.Opts{Env: env})
	c := newContract(t, s.API.URL)
	op, viewer := apptest.OperatorToken, apptest.ViewerToken
	catalog := jobset.Catalog()
	big := `{"params":{},"pad":"` + strings.Repeat("x", 2<<20) + `"}`

	// A run to its end: the request before it is claimed (no execution,
	// no instance), then DONE with both; the job list with a last
	// execution for aptTrade and none for the others.
	w, _ := s.StartWorker()
	created := c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/aptTrade/requests", token: op,
		body: apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"), want: http.StatusAccepted})
	id := created["requestId"].(string)
	c.Do(exchange{method: http.MethodGet, path: "/v1/requests/" + id, token: viewer, want: http.StatusOK})
	var out map[string]any
	apptest.WaitUntil(t, time.Minute, "request "+id+" to end", func() bool {
		out = c.Do(exchange{method: http.MethodGet, path: "/v1/requests/" + id, token: viewer, want: http.StatusOK})
		return out["status"] == "DONE" || out["status"] == "FAILED"
	})
	require.Equal(t, "DONE", out["status"], "%v", out)
	c.Do(exchange{method: http.MethodGet, path: "/v1/workers", token: viewer, want: http.StatusOK})
	require.NoError(t, w.Stop(context.Background()))
	c.Do(exchange{method: http.MethodGet, path: "/v1/jobs", token: viewer, want: http.StatusOK})
	c.Do(exchange{method: http.MethodGet, path: "/v1/workers", token: viewer, want: http.StatusOK})

	// Stop and abandon: a STARTED execution on a live worker, then stale.
	_, execID := s.InsertRunning("1@contract#a", time.Now())
	c.Do(exchange{method: http.MethodGet, path: "/v1/jobs", token: viewer, want: http.StatusOK})
	c.Do(exchange{method: http.MethodGet, path: "/v1/jobs/aptTrade", token: viewer, want: http.StatusOK})
	c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/aptTrade/requests", token: op,
		body: apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"), want: http.StatusConflict})
	// With an Idempotency-Key: the first answer, its replay, and the key
	// reused for another call (422).
	c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/aptTrade/stop", token: op, key: "contract-stop", want: http.StatusAccepted})
	c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/aptTrade/stop", token: op, key: "contract-stop", want: http.StatusAccepted, replayed: "true"})
	c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/creditEval/stop", token: op, key: "contract-stop", want: http.StatusUnprocessableEntity})
	abandon := fmt.Sprintf("/v1/executions/%d/abandon", execID)
	c.Do(exchange{method: http.MethodPost, path: abandon, token: op, want: http.StatusConflict})
	testfactory.WorkerHeartbeatAge(context.Background(), t, s.Pool, "1@contract#a", time.Hour)
	c.Do(exchange{method: http.MethodPost, path: abandon, token: op, key: "contract-abandon", want: http.StatusOK})
	c.Do(exchange{method: http.MethodPost, path: abandon, token: op, key: "contract-abandon", want: http.StatusOK, replayed: "true"})
	c.Do(exchange{method: http.MethodPost, path: "/v1/executions/999999/abandon", token: op, key: "contract-abandon", want: http.StatusUnprocessableEntity})
	c.Do(exchange{method: http.MethodPost, path: abandon, token: op, key: strings.Repeat("k", 256), invalid: true, want: http.StatusBadRequest})
	c.Do(exchange{method: http.MethodPost, path: abandon, token: op, want: http.StatusConflict})
	c.Do(exchange{method: http.MethodPost, path: "/v1/executions/999999/abandon", token: op, want: http.StatusNotFound})
	c.Do(exchange{method: http.MethodPost, path: "/v1/executions/x1/abandon", token: op, invalid: true, want: http.StatusBadRequest})
	c.Do(exchange{method: http.MethodPost, path: abandon, token: viewer, want: http.StatusForbidden})
	c.Do(exchange{method: http.MethodPost, path: abandon, invalid: true, want: http.StatusUnauthorized})
	c.Do(exchange{method: http.MethodPost, path: abandon, token: op, body: big, invalid: true, want: http.StatusRequestEntityTooLarge})
	c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/aptTrade/stop", token: op, want: http.StatusConflict})
	c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/noSuchJob/stop", token: op, want: http.StatusNotFound})
	c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/aptTrade/stop", token: viewer, want: http.StatusForbidden})
	c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/aptTrade/stop", invalid: true, want: http.StatusUnauthorized})
	c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/aptTrade/stop", token: op, body: big, invalid: true, want: http.StatusRequestEntityTooLarge})

	// Every job's request: accepted, a duplicate, bad params, no token, a
	// viewer's, a body over the limit; its estimate and its detail.
	for _, def := range catalog.All() {
		name := def.Name()
		example, err := json.Marshal(map[string]any{"params": def.Example()})
		require.NoError(t, err)
		path := "/v1/jobs/" + name + "/requests"
		key := "contract-" + name
		out := c.Do(exchange{method: http.MethodPost, path: path, token: op, key: key, body: string(example), want: http.StatusAccepted})
		again := c.Do(exchange{method: http.MethodPost, path: path, token: op, key: key, body: string(example), want: http.StatusAccepted, replayed: "true"})
		require.Equal(t, out, again, name)
		dup := c.Do(exchange{method: http.MethodPost, path: path, token: op, body: string(example), want: http.StatusConflict})
		require.Equal(t, out["requestId"], dup["activeRequestId"], name)
		other := strings.TrimSuffix(string(example), "}") + `,"maxCalls":7}`
		c.Do(exchange{method: http.MethodPost, path: path, token: op, key: key, body: other, want: http.StatusUnprocessableEntity})
		c.Do(exchange{method: http.MethodPost, path: path, token: op, body: `{"params":{"noSuchParam":1}}`, invalid: true, want: http.StatusBadRequest})
		c.Do(exchange{method: http.MethodPost, path: path, body: string(example), invalid: true, want: http.StatusUnauthorized})
		c.Do(exchange{method: http.MethodPost, path: path, token: viewer, body: string(example), want: http.StatusForbidden})
		c.Do(exchange{method: http.MethodPost, path: path, token: op, body: big, invalid: true, want: http.StatusRequestEntityTooLarge})
		c.Do(exchange{method: http.MethodGet, path: "/v1/requests/" + out["requestId"].(string), token: viewer, want: http.StatusOK})

		estimate := "/v1/jobs/" + name + "/estimate"
		c.Do(exchange{method: http.MethodPost, path: estimate, token: op, body: string(example), want: http.StatusOK})
		c.Do(exchange{method: http.MethodPost, path: estimate, token: op, body: `{"params":{"noSuchParam":1}}`, invalid: true, want: http.StatusBadRequest})
		c.Do(exchange{method: http.MethodGet, path: "/v1/jobs/" + name, token: viewer, want: http.StatusOK})
	}
	// A call while another with the same key is still being processed (the
	// test's transaction holds the key's lock): 409 in progress.
	holdKeyLock(t, s.OwnerURL, op, "contract-in-progress", func() {
		c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/aptTrade/requests", token: op, key: "contract-in-progress",
			body: apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"), want: http.StatusConflict})
	})
	c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/noSuchJob/requests", token: op, body: `{"params":{}}`, want: http.StatusNotFound})
	c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/noSuchJob/requests", token: viewer, body: `{"params":{}}`, want: http.StatusForbidden})
	c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/noSuchJob/requests", body: `{"params":{}}`, invalid: true, want: http.StatusUnauthorized})
	c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/noSuchJob/requests", token: op, body: big, invalid: true, want: http.StatusRequestEntityTooLarge})
	c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/noSuchJob/estimate", token: op, body: `{"params":{}}`, want: http.StatusNotFound})
	c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/aptTrade/estimate", token: viewer, body: `{"params":{}}`, want: http.StatusForbidden})
	c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/aptTrade/estimate", body: `{"params":{}}`, invalid: true, want: http.StatusUnauthorized})
	c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/aptTrade/estimate", token: op, body: big, invalid: true, want: http.StatusRequestEntityTooLarge})

	// The reads: success, their 400s, 404s and 401s.
	c.Do(exchange{method: http.MethodGet, path: "/v1/jobs", token: viewer, want: http.StatusOK})
	c.Do(exchange{method: http.MethodGet, path: "/v1/jobs", invalid: true, want: http.StatusUnauthorized})
	c.Do(exchange{method: http.MethodGet, path: "/v1/jobs/noSuchJob", token: viewer, want: http.StatusNotFound})
	c.Do(exchange{method: http.MethodGet, path: "/v1/jobs/aptTrade", invalid: true, want: http.StatusUnauthorized})
	c.Do(exchange{method: http.MethodGet, path: "/v1/requests", token: viewer, want: http.StatusOK})
	first := c.Do(exchange{method: http.MethodGet, path: "/v1/requests?limit=2", token: viewer, want: http.StatusOK})
	cursor, _ := first["nextCursor"].(string)
	require.NotEmpty(t, cursor)
	c.Do(exchange{method: http.MethodGet, path: "/v1/requests?job=aptTrade&status=DONE&limit=1&cursor=" + url.QueryEscape(cursor), token: viewer, want: http.StatusOK})
	c.Do(exchange{method: http.MethodGet, path: "/v1/requests?outcome=COMPLETED&job=aptTrade", token: viewer, want: http.StatusOK})
	c.Do(exchange{method: http.MethodGet, path: "/v1/requests?outcome=STOPPED&cause=max_calls", token: viewer, want: http.StatusOK})
	c.Do(exchange{method: http.MethodGet, path: "/v1/requests?outcome=ABANDONED&endedOn=today", token: viewer, want: http.StatusOK})
	c.Do(exchange{method: http.MethodGet, path: "/v1/requests?outcome=COMPLETED&endedOn=2025-01-31&job=aptTrade&limit=1", token: viewer, want: http.StatusOK})
	c.Do(exchange{method: http.MethodGet, path: "/v1/requests?endedOn=today", token: viewer, invalid: true, want: http.StatusBadRequest})
	c.Do(exchange{method: http.MethodGet, path: "/v1/requests?outcome=STOPPED&endedOn=2025-02-30", token: viewer, invalid: true, want: http.StatusBadRequest})
	c.Do(exchange{method: http.MethodGet, path: "/v1/requests?outcome=DONE", token: viewer, invalid: true, want: http.StatusBadRequest})
	c.Do(exchange{method: http.MethodGet, path: "/v1/requests?limit=0", token: viewer, invalid: true, want: http.StatusBadRequest})
	c.Do(exchange{method: http.MethodGet, path: "/v1/requests", invalid: true, want: http.StatusUnauthorized})
	c.Do(exchange{method: http.MethodGet, path: "/v1/requests/" + id, invalid: true, want: http.StatusUnauthorized})
	c.Do(exchange{method: http.MethodGet, path: "/v1/requests/999999", token: viewer, want: http.StatusNotFound})
	c.Do(exchange{method: http.MethodGet, path: "/v1/requests/x1", token: viewer, invalid: true, want: http.StatusBadRequest})
	c.Do(exchange{method: http.MethodGet, path: "/v1/workers", invalid: true, want: http.StatusUnauthorized})
	c.Do(exchange{method: http.MethodGet, path: "/v1/alerts", token: viewer, want: http.StatusOK})
	c.Do(exchange{method: http.MethodGet, path: "/v1/alerts?date=2025-01-31&company=00126380", token: viewer, want: http.StatusOK})
	c.Do(exchange{method: http.MethodGet, path: "/v1/alerts?date=yesterday", token: viewer, invalid: true, want: http.StatusBadRequest})
	c.Do(exchange{method: http.MethodGet, path: "/v1/alerts", invalid: true, want: http.StatusUnauthorized})
	c.Do(exchange{method: http.MethodGet, path: "/v1/providers", token: viewer, want: http.StatusOK})
	c.Do(exchange{method: http.MethodGet, path: "/v1/providers", invalid: true, want: http.StatusUnauthorized})
	c.Do(exchange{method: http.MethodGet, path: "/v1/coverage", token: viewer, want: http.StatusOK})
	c.Do(exchange{method: http.MethodGet, path: "/v1/coverage", invalid: true, want: http.StatusUnauthorized})
	c.Do(exchange{method: http.MethodGet, path: "/v1/coverage/creditEval/missing?limit=1", token: viewer, want: http.StatusOK})
	c.Do(exchange{method: http.MethodGet, path: "/v1/coverage/creditEval/missing?limit=0", token: viewer, invalid: true, want: http.StatusBadRequest})
	c.Do(exchange{method: http.MethodGet, path: "/v1/coverage/aptTrade/missing", token: viewer, want: http.StatusNotFound})
	c.Do(exchange{method: http.MethodGet, path: "/v1/coverage/creditEval/missing", invalid: true, want: http.StatusUnauthorized})
	c.Do(exchange{method: http.MethodGet, path: "/v1/jobs/creditEval/history", token: viewer, want: http.StatusOK})
	c.Do(exchange{method: http.MethodGet, path: "/v1/jobs/aptTrade/history?days=31", token: op, want: http.StatusOK})
	c.Do(exchange{method: http.MethodGet, path: "/v1/jobs/creditEval/history?days=32", token: viewer, invalid: true, want: http.StatusBadRequest})
	c.Do(exchange{method: http.MethodGet, path: "/v1/jobs/noSuchJob/history", token: viewer, want: http.StatusNotFound})
	c.Do(exchange{method: http.MethodGet, path: "/v1/jobs/creditEval/history", invalid: true, want: http.StatusUnauthorized})
	c.Do(exchange{method: http.MethodGet, path: "/v1/audit", token: op, want: http.StatusOK})
	c.Do(exchange{method: http.MethodGet, path: "/v1/audit?limit=1", token: op, want: http.StatusOK})
	c.Do(exchange{method: http.MethodGet, path: "/v1/audit?limit=0", token: op, invalid: true, want: http.StatusBadRequest})
	c.Do(exchange{method: http.MethodGet, path: "/v1/audit", token: viewer, want: http.StatusForbidden})
	c.Do(exchange{method: http.MethodGet, path: "/v1/audit", invalid: true, want: http.StatusUnauthorized})

	// Every POST refuses a body that is not JSON (415) or repeats a key
	// (400) before its handler runs.
	for path, item := range c.doc.Paths.Map() {
		if item.Post == nil {
			continue
		}
		path = strings.NewReplacer("{job}", "noSuchJob", "{id}", "999999").Replace(path)
		c.Do(exchange{method: http.MethodPost, path: path, token: op, body: `{"params":{}}`, contentType: "text/plain", invalid: true, want: http.StatusUnsupportedMediaType})
		c.Do(exchange{method: http.MethodPost, path: path, token: op, body: `{"params":{},"params":{}}`, invalid: true, want: http.StatusBadRequest})
	}

	// The database unavailable: every table locked, so each operation's
	// statement hits the api's lock_timeout and answers 503 + Retry-After.
	lockEverything(t, s.OwnerURL, func() {
		reads := []string{"/v1/jobs", "/v1/jobs/aptTrade", "/v1/requests", "/v1/requests/" + id, "/v1/workers", "/v1/alerts", "/v1/providers",
			"/v1/coverage", "/v1/coverage/creditEval/missing", "/v1/jobs/creditEval/history"}
		for _, path := range reads {
			c.Do(exchange{method: http.MethodGet, path: path, token: viewer, want: http.StatusServiceUnavailable})
		}
		c.Do(exchange{method: http.MethodGet, path: "/v1/audit", token: op, want: http.StatusServiceUnavailable})
		for _, def := range catalog.All() {
			example, err := json.Marshal(map[string]any{"params": def.Example()})
			require.NoError(t, err)
			c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/" + def.Name() + "/requests", token: op, body: string(example), want: http.StatusServiceUnavailable})
		}
		// stockPrice's estimate counts the listed companies in the database.
		c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/stockPrice/estimate", token: op,
			body: `{"params":{"date":"2025-01-31"}}`, want: http.StatusServiceUnavailable})
		c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/aptTrade/requests", token: op, key: "contract-503",
			body: apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"), want: http.StatusServiceUnavailable})
		c.Do(exchange{method: http.MethodPost, path: "/v1/jobs/aptTrade/stop", token: op, want: http.StatusServiceUnavailable})
		c.Do(exchange{method: http.MethodPost, path: abandon, token: op, want: http.StatusServiceUnavailable})
	})

	// A GET carries no body: sent with one, every GET answers 400 unread.
	for path, item := range c.doc.Paths.Map() {
		if item.Get != nil {
			path := strings.NewReplacer("{job}", "aptTrade", "{id}", "1").Replace(path)
			c.Do(exchange{method: http.MethodGet, path: path, token: op, body: `{}`, invalid: true, want: http.StatusBadRequest})
		}
	}

	// Token guessing: past AuthFailuresMax wrong tokens from this address,
	// every operation answers a wrong token 429 with Retry-After (a right
	// one is never refused).
	for i := range api.AuthFailuresMax {
		c.Do(exchange{method: http.MethodGet, path: "/v1/jobs", token: fmt.Sprintf("wrong-token-%d-0123456789abcdef0123456789", i), invalid: true, want: http.StatusUnauthorized})
	}
	for path, item := range c.doc.Paths.Map() {
		for method, operation := range item.Operations() {
			if operation.Security == nil || len(*operation.Security) == 0 {
				continue
			}
			path := strings.NewReplacer("{job}", "aptTrade", "{id}", "1").Replace(path)
			body := ""
			if parts := strings.Split(path, "/"); method == http.MethodPost && len(parts) == 5 && (parts[4] == "requests" || parts[4] == "estimate") {
				def, ok := catalog.Lookup(parts[3])
				require.True(t, ok, path)
				example, err := json.Marshal(map[string]any{"params": def.Example()})
				require.NoError(t, err)
				body = string(example)
			}
			c.Do(exchange{method: method, path: path, token: "wrong-token-limited-0123456789abcdef0123456789", invalid: true, body: body, want: http.StatusTooManyRequests})
		}
	}

	// A Host the api does not answer for (BUILDRISK_ALLOWED_HOSTS): 421 on
	// every operation, before anything else.
	for path, item := range c.doc.Paths.Map() {
		for method := range item.Operations() {
			path := strings.NewReplacer("{job}", "aptTrade", "{id}", "1").Replace(path)
			c.Do(exchange{method: method, path: path, token: op, host: "rebound.example", invalid: true, want: http.StatusMisdirectedRequest})
		}
	}

	// Every problem type was answered, but those no exchange can drive here:
	// an internal error, a client gone before its answer, a request over a
	// daily cap (TestRequestPath_BadInput drives that one) and a token past
	// its rate limit (TestRateLimit_PerToken drives that one).
	var unanswered []string
	for _, t := range api.ProblemTypes() {
		switch t {
		case api.ProblemInternalError, api.ProblemClientClosedRequest, api.ProblemCapExceeded, api.ProblemRateLimited:
			continue
		}
		if !c.problemTypes[string(t)] {
			unanswered = append(unanswered, string(t))
		}
	}
	if len(unanswered) > 0 {
		t.Errorf("problem types no exchange was answered with: %s", strings.Join(unanswered, ", "))
	}

	missing := c.unseen()
	t.Logf("%d exchanges checked against the document, %d violations, %d documented answers never driven", c.checked, len(c.violations), len(missing))
	if len(c.violations) > 0 || len(missing) > 0 {
		t.Errorf("%d violations of the served OpenAPI document:\n  %s", len(c.violations), strings.Join(c.violations, "\n  "))
		if len(missing) > 0 {
			t.Errorf("%d documented answers never driven:\n  %s", len(missing), strings.Join(missing, "\n  "))
		}
	}
}

// holdKeyLock runs fn while a transaction of the test holds the advisory
// lock of an Idempotency-Key of token's (named by its fingerprint, as a
// token without a name is), as a call with that key being processed does.
func holdKeyLock(t *testing.T, ownerURL, token, key string, fn func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, ownerURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	sum := sha256.Sum256([]byte(token))
	_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('buildrisk.idempotency:' || $1 || ':' || $2, 0))`, "fp-"+hex.EncodeToString(sum[:4]), key)
	require.NoError(t, err)
	fn()
}

// lockEverything runs fn while one transaction holds an ACCESS EXCLUSIVE
// lock on every table of the schema.
func lockEverything(t *testing.T, ownerURL string, fn func()) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, ownerURL)
	require.NoError(t, err)
	defer pool.Close()
	rows, err := pool.Query(ctx, `SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables
		WHERE schemaname NOT IN ('pg_catalog', 'information_schema')`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotEmpty(t, tables)
	slices.Sort(tables)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "LOCK TABLE "+strings.Join(tables, ", ")+" IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	fn()
}

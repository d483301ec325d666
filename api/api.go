// Package api is buildrisk-radar's HTTP API (Huma v2, OpenAPI 3.1): it
// validates and enqueues job requests and reports on requests, jobs,
// executions and workers. It never runs a job and holds no provider keys.
// It also serves the batch console at / (console.go, session.go), a page
// that calls this same API with a session cookie instead of a bearer token.
//
// Every domain error becomes an HTTP status in exactly one place
// (problemFrom); a handler never returns a raw error, so a user's mistake is
// a 4xx naming the field and internal detail never leaks into a 500.
package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/danielgtaylor/huma/v2/yaml"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/catalog/coverage"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/forecast"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/sql/pgtx"
)

// RequestTimeoutDefault is Config.RequestTimeout's default.
const RequestTimeoutDefault = 10 * time.Second

// RetryAfterSeconds is the Retry-After of a 503: the database is restarting,
// saturated or locked, which takes seconds to clear.
const RetryAfterSeconds = 2

// StaleAfterDefault mirrors the worker's default stale window; the API uses
// it to tell live workers from dead ones.
const StaleAfterDefault = 60 * time.Second

// Requests is what the api needs of the request owner (request.Owner):
// it creates requests and estimates them, and ends the request of an
// execution an operator abandons; the owner alone writes requests.
type Requests interface {
	Enqueue(ctx context.Context, p *request.EnqueueParams) (*request.EnqueueResult, error)
	Estimate(ctx context.Context, db queries.DBTX, p *request.EnqueueParams) (*request.Estimate, error)
	Abandon(ctx context.Context, tx pgx.Tx, a *request.Abandonment) (bool, error)
}

// Config configures a Server.
type Config struct {
	// Tokens maps bearer tokens to roles. Empty with Insecure false refuses
	// every /v1 call.
	Tokens map[string]Role
	// TokenNames maps tokens to their names (ParseTokens); a token missing
	// here is named by its fingerprint.
	TokenNames map[string]string
	// SessionKey signs console session cookies (BUILDRISK_SESSION_KEY);
	// empty: a random key per process (see newSessionSigner).
	SessionKey []byte
	// Insecure disables auth (BUILDRISK_INSECURE_NO_AUTH=1).
	Insecure bool
	// Catalog lists the jobs. Required.
	Catalog *catalog.Catalog
	// AlertRules documents the rule set in the description of GET
	// /v1/alerts: the rules job's own text (riskrule.Doc), given here
	// because the api does not import the job packages. Required.
	AlertRules string
	// Requests creates requests and ends abandoned ones: the process's
	// request owner (request.Owner). Required.
	Requests Requests
	// StaleAfter tells live workers from dead ones (job list keys, abandon).
	StaleAfter time.Duration
	// Coverage counts every job's coverage (GET /v1/coverage); nil counts
	// on the server's pool in UTC with the default cache age.
	Coverage *coverage.Reader
	// Instruments count API events. Required.
	Instruments *observability.Instruments
	// MetricsHandler serves /metrics; nil serves 404.
	MetricsHandler http.Handler
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Version is shown in the OpenAPI document.
	Version string
	// Schedules returns a job's schedule and next run; nil = none.
	Schedules func(job string) (schedule string, next *time.Time)
	// DailyCaps is each provider's daily call cap, for GET /v1/providers.
	// A provider missing here has no cap.
	DailyCaps map[string]int
	// Location is the budget day's zone (BUILDRISK_TIMEZONE); nil is UTC.
	Location *time.Location
	// Today returns the call budget's current day (midnight UTC of the
	// date in the budget's time zone); nil uses today's UTC date.
	Today func() time.Time
	// Deadlines are the jobs' deadlines (BUILDRISK_DEADLINE_<JOB>); a job
	// without one is absent. GET /v1/jobs judges each against its run's
	// forecast.
	Deadlines map[string]forecast.Deadline
	// Now is the clock deadlines are judged by; nil is time.Now.
	Now func() time.Time
	// RiverUI, when set, is served under /riverui/ to operators only (a
	// console session or an operator bearer token), read-only (its
	// mutations are refused with 403), and linked from the console. It is
	// an opaque handler: the api knows nothing of River's internals.
	RiverUI http.Handler
	// RequestTimeout bounds the database work of one /v1 call, waiting for
	// a pooled connection included; when it passes the call answers 503.
	// Default RequestTimeoutDefault. Set it above the connections'
	// statement_timeout, so a slow statement is cancelled by the server
	// first.
	RequestTimeout time.Duration
	// TxSettings, when set, are applied with SET LOCAL to every transaction
	// a /v1 call runs (pgtx.WithTxSettings): the api's statement and
	// lock timeouts behind PgBouncer's transaction pooling, where they
	// cannot be session settings. Statements outside a transaction are
	// then bounded by RequestTimeout alone (pgx cancels them, and PgBouncer
	// forwards the cancel).
	TxSettings *pgtx.TxSettings
	// AllowedHosts are the host names (or IP addresses) the api answers for,
	// ports aside (BUILDRISK_ALLOWED_HOSTS; loopback names by default with
	// Insecure): any other Host is answered 421 (checkHost). Empty: any Host.
	AllowedHosts []string
	// TrustedProxies are the proxies whose X-Forwarded-For names the client
	// (BUILDRISK_TRUSTED_PROXIES): the address the audit trail, the logs and
	// the limits of failed credential checks know a client by. From any
	// other peer the header is ignored. Empty: every client is its peer.
	TrustedProxies []netip.Prefix
	// MaxBodyBytes bounds every request body (BUILDRISK_MAX_BODY_BYTES);
	// default MaxBodyBytesDefault. A larger body is answered 413 unread.
	MaxBodyBytes int64
	// TokenRateLimit is each token's budget of /v1 requests per minute
	// (BUILDRISK_TOKEN_RATE_LIMIT; TokenRateLimitDefault from the
	// environment): past it the token is answered 429 until its budget
	// refills. Every token, a viewer's or an operator's, has a budget of
	// its own. 0 turns the limit off.
	TokenRateLimit int
	// IdempotencyRetention is how long an Idempotency-Key is kept
	// (BUILDRISK_IDEMPOTENCY_RETENTION): a retry within it is answered from
	// the key's record; default IdempotencyRetentionDefault.
	IdempotencyRetention time.Duration
}

// Server is the API.
type Server struct {
	cfg  Config
	pool *pgxpool.Pool
	// reads is pool with every statement planned at each call
	// (queries.PlanEachCall): the api's reads depend on how much history
	// there is, and a plan cached on a long-lived connection outlives it.
	// A read made only of primary-key and index lookups (JobRequestView)
	// uses pool's cached statements instead: its generic plan is the same
	// at any size, and queries/plan_test.go checks that plan, prepared on
	// empty tables, after 100,000 executions of history.
	reads   queries.DBTX
	queries *queries.Queries
	api     huma.API
	// openAPI30Once makes the OpenAPI 3.0 copy once (openAPI30).
	openAPI30Once                sync.Once
	openAPI30JSON, openAPI30YAML []byte
	openAPI30Err                 error
	mux                          *http.ServeMux
	sessions                     *sessionSigner
	// authLimit counts failed credential checks per client and in all.
	authLimit *authLimiter
	// tokenLimit is each token's budget of requests (Config.TokenRateLimit).
	tokenLimit *tokenLimiter
	// crossOrigin rejects unsafe requests a browser marks as coming from
	// another origin (Sec-Fetch-Site, Origin); see authenticate.
	crossOrigin *http.CrossOriginProtection
}

// New returns a Server with every operation registered.
func New(pool *pgxpool.Pool, cfg Config) (*Server, error) {
	switch {
	case cfg.Catalog == nil:
		return nil, errors.New("api: Catalog is required")
	case cfg.AlertRules == "":
		return nil, errors.New("api: AlertRules is required")
	case cfg.Requests == nil:
		return nil, errors.New("api: Requests is required")
	case cfg.Instruments == nil:
		return nil, errors.New("api: Instruments is required")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.StaleAfter = cmp.Or(cfg.StaleAfter, StaleAfterDefault)
	cfg.Version = cmp.Or(cfg.Version, "dev")
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, MaxBodyBytesDefault)
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, RequestTimeoutDefault)
	cfg.IdempotencyRetention = cmp.Or(cfg.IdempotencyRetention, IdempotencyRetentionDefault)
	if cfg.MaxBodyBytes < 0 || cfg.RequestTimeout < 0 || cfg.IdempotencyRetention < 0 {
		return nil, errors.New("api: MaxBodyBytes, RequestTimeout and IdempotencyRetention must be positive")
	}
	if cfg.Location == nil {
		cfg.Location = time.UTC
	}
	if cfg.Today == nil {
		cfg.Today = func() time.Time { return time.Now().UTC().Truncate(24 * time.Hour) }
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Coverage == nil {
		cover, err := coverage.New(pool, coverage.Config{Catalog: cfg.Catalog})
		if err != nil {
			return nil, fmt.Errorf("api: %w", err)
		}
		cfg.Coverage = cover
	}
	s := &Server{
		cfg: cfg, pool: pool, reads: queries.PlanEachCall(pool), queries: queries.New(), mux: http.NewServeMux(),
		sessions: newSessionSigner(cfg.SessionKey, cfg.Tokens, time.Now), authLimit: newAuthLimiter(time.Now), tokenLimit: newTokenLimiter(cfg.TokenRateLimit, time.Now), crossOrigin: http.NewCrossOriginProtection(),
	}

	cfg.Instruments.AuthFailuresInit(context.Background())
	cfg.Instruments.RateLimitedInit(context.Background())

	s.api = humago.New(s.mux, openAPIConfig(cfg.Version, cfg.Catalog))
	s.Register(s.api)
	nullableRefs(s.api.OpenAPI())
	nullableEnums(s.api.OpenAPI())
	documentProblemTypes(s.api.OpenAPI())

	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	})
	s.mux.HandleFunc("GET /readyz", s.readyz)
	if cfg.MetricsHandler != nil {
		s.mux.Handle("GET /metrics", cfg.MetricsHandler)
	}
	s.registerConsole()
	s.registerDocs()
	s.registerProblems()
	if cfg.RiverUI != nil {
		s.mux.Handle(riverUIPrefix+"/", riverUIReadOnly(cfg.RiverUI, func(ctx context.Context, path string) {
			s.audit(ctx, "", AuditRiverUIWrite, path, "River UI is read-only")
		}))
		s.mux.Handle(riverUIPrefix, http.RedirectHandler(riverUIPrefix+"/", http.StatusMovedPermanently))
	}
	return s, nil
}

// openAPIConfig is the API's Huma configuration: the OpenAPI document's
// info, servers, tags and security scheme, and the hook that documents the
// errors every operation can answer, so that a client generated from the
// document knows every status it will see; the schemas are named by
// schemaNamer.
func openAPIConfig(version string, jobCatalog *catalog.Catalog) huma.Config {
	c := huma.DefaultConfig("buildrisk-radar", version)
	c.Components.Schemas = huma.NewMapRegistry("#/components/schemas/", schemaNamer(jobCatalog))
	c.Info.Description = "Enqueue and observe buildrisk-radar's batch jobs. GETs need a viewer or operator token, POSTs an operator token. " +
		"Errors are RFC 9457 problem+json whose type is one of a closed set (ErrorModel.type; each is also a page of this api, see /problems/): branch on type, not on detail. " +
		"Bad input is a 400 naming the field. The POSTs that start or change work take an optional Idempotency-Key header (IETF httpapi draft -09): " +
		"a retry with the same key and body is answered with the first answer again (Idempotent-Replayed: true) and starts nothing."
	c.Info.Contact = &huma.Contact{Name: "buildrisk-radar operators"}
	c.Info.License = &huma.License{Name: "Proprietary", Identifier: "LicenseRef-Proprietary"}
	// "/" is the api that serves the document, wherever it is deployed; the
	// second entry is for clients generated from a saved copy. Its
	// variables carry no description (the server's says what they are):
	// @apidevtools/swagger-parser, and so orval 7, refuses a 3.1 server
	// variable's description ("must NOT have unevaluated properties").
	c.Servers = []*huma.Server{
		{URL: "/", Description: "the api that serves this document"},
		{
			URL: "{scheme}://{host}",
			Description: "an api role (radar api; radar dev serves http on localhost:8080): scheme is https behind a TLS-terminating proxy, " +
				"host the api's host and port (BUILDRISK_HTTP_ADDR)",
			Variables: map[string]*huma.ServerVariable{
				"scheme": {Default: "https", Enum: []string{"http", "https"}},
				"host":   {Default: "localhost:8080"},
			},
		},
	}
	// No $schema member in response bodies (Huma's default link
	// transformer): the bodies are exactly the documented shapes, and no
	// body carries a URL built from a Host header a proxy may have changed.
	c.CreateHooks = nil
	// Every date-time in UTC (utcTimes).
	c.Transformers = append(c.Transformers, utcTimes)
	// /docs is served by registerDocs, with the renderer embedded: Huma's
	// own page loads it from a CDN and is blank offline.
	c.DocsPath = ""
	c.Tags = []*huma.Tag{
		{Name: "jobs", Description: "The job catalog: each job's params, last execution, schedule and whether its provider keys are configured; stopping a run."},
		{Name: "requests", Description: "Requesting a run (202 at once, 409 while the job has an active request) and following its progress."},
		{Name: "executions", Description: "Executions of a job: abandoning one whose worker is dead."},
		{Name: "workers", Description: "The worker registry: heartbeats, configured key names and the requests each worker holds."},
		{Name: "audit", Description: "The audit trail: who did what, when and from where (operators only)."},
		{Name: "alerts", Description: "The risk alerts the rules job wrote, with the values that fired them."},
	}
	c.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"bearer": {Type: "http", Scheme: "bearer", Description: "A viewer or operator token of BUILDRISK_API_TOKENS."},
	}
	c.OnAddOperation = append(c.OnAddOperation, documentErrors)
	return c
}

// schemaNamer names the params schema of each of catalog's jobs after the
// job ("aptTrade" -> AptTradeParams), and every other schema as Huma does
// (after its Go type). A component name is part of the API (generated
// clients name their types after it), and the job names are public while
// the Go types that carry the params are not: every job package may name
// its own type Params.
func schemaNamer(jobCatalog *catalog.Catalog) func(t reflect.Type, hint string) string {
	byType := map[reflect.Type]string{problemType: problemSchemaName}
	for _, def := range jobCatalog.All() {
		byType[def.ParamsType()] = paramsSchemaName(def.Name())
	}
	return func(t reflect.Type, hint string) string {
		named := t
		for named.Kind() == reflect.Pointer {
			named = named.Elem()
		}
		if name, ok := byType[named]; ok {
			return name
		}
		return huma.DefaultSchemaNamer(t, hint)
	}
}

// paramsSchemaName is the component name of job's params schema: the job's
// name with its first letter upper-cased, then "Params".
func paramsSchemaName(job string) string {
	if job == "" {
		return "Params"
	}
	return strings.ToUpper(job[:1]) + job[1:] + "Params"
}

// documentErrors adds to op the errors that happen outside its handler, so
// that the document lists every status a client can see:
//   - 401 (with WWW-Authenticate) for an operation that needs a token, 403
//     for one that needs an operator's (every POST), 429 (with Retry-After)
//     once its client sent too many wrong tokens (authLimiter) or its token
//     spent its requests per minute (tokenLimiter, with RateLimit headers);
//   - 413 for an operation that takes a body (every POST): limitBody
//     answers it before the handler; 400 for a GET sent with a body,
//     which limitBody refuses unread;
//   - 415 for a /v1 body that is not application/json and 400 for one
//     that repeats a key (requireJSON), on every /v1 POST;
//   - 503 with Retry-After for every /v1 operation: the database is
//     unavailable or busy (problemFrom);
//   - 421 for every operation: the Host is not one of AllowedHosts
//     (checkHost);
//   - the 409 as ConflictError, the problem with activeRequestId;
//   - Huma's schema-validation failure as the 400 this API answers it with
//     (see init), and only where Huma can raise one: an operation whose
//     inputs are all unconstrained strings (every one but a JSON body) never
//     fails Huma's validation, and a 400 it does answer is declared by its
//     handler's Errors.
func documentErrors(oapi *huma.OpenAPI, op *huma.Operation) {
	if op.Responses == nil {
		op.Responses = map[string]*huma.Response{}
	}
	problem := func(status int, schema *huma.Schema) *huma.Response {
		if schema == nil {
			schema = oapi.Components.Schemas.Schema(problemType, true, problemSchemaName)
		}
		return &huma.Response{
			Description: http.StatusText(status),
			Content:     map[string]*huma.MediaType{"application/problem+json": {Schema: schema}},
		}
	}
	add := func(status int) *huma.Response {
		key := strconv.Itoa(status)
		if op.Responses[key] == nil {
			op.Responses[key] = problem(status, nil)
		}
		return op.Responses[key]
	}
	if r, ok := op.Responses["422"]; ok {
		delete(op.Responses, "422")
		if op.Responses["400"] == nil && humaValidates(op) {
			r.Description = http.StatusText(http.StatusBadRequest)
			op.Responses["400"] = r
		}
	}
	if r, ok := op.Responses["409"]; ok {
		r.Content = problem(http.StatusConflict, oapi.Components.Schemas.Schema(reflect.TypeFor[ConflictError](), true, "ConflictError")).Content
	}
	if takesIdempotencyKey(op) {
		r := add(http.StatusUnprocessableEntity)
		r.Description = "The Idempotency-Key was used within its retention for another request (type idempotency-key-reused); nothing was done"
		if c := op.Responses["409"]; c != nil {
			c.Description = "Conflict; type idempotency-key-in-progress while a call with the same Idempotency-Key is still being processed"
		}
		if ok := op.Responses[strconv.Itoa(op.DefaultStatus)]; ok != nil {
			ok.Description += "; Idempotent-Replayed: true when it is the recorded answer of an earlier call with the same Idempotency-Key"
		}
	}
	if len(op.Security) > 0 {
		add(http.StatusUnauthorized).Headers = map[string]*huma.Header{
			"WWW-Authenticate": {Description: "the Bearer challenge", Schema: &huma.Schema{Type: huma.TypeString}},
		}
		if op.Method != http.MethodGet {
			add(http.StatusForbidden)
		}
		r := add(http.StatusTooManyRequests)
		r.Description = "Too many failed credential checks from this address (type too-many-auth-failures; AuthFailuresMax a minute), " +
			"or this token spent its requests per minute (type rate-limited; BUILDRISK_TOKEN_RATE_LIMIT); retry after Retry-After seconds"
		r.Headers = map[string]*huma.Header{
			"Retry-After": {Description: "seconds to wait before retrying", Required: true, Schema: &huma.Schema{Type: huma.TypeInteger, Minimum: new(float64(1))}},
			"RateLimit-Policy": {Description: `the token's budget (IETF draft httpapi-ratelimit-headers), e.g. "per-token";q=1200;w=60; sent with every answer to a token while the limit is on`,
				Schema: &huma.Schema{Type: huma.TypeString}},
			"RateLimit": {Description: `what is left of the budget and the seconds until the budget is whole again (429: until a request is allowed), e.g. "per-token";r=0;t=3`,
				Schema: &huma.Schema{Type: huma.TypeString}},
		}
	}
	if op.Method != http.MethodGet {
		add(http.StatusRequestEntityTooLarge).Description = "The body is over the limit (BUILDRISK_MAX_BODY_BYTES)"
	} else {
		// limitBody refuses a GET with a body before reading it.
		add(http.StatusBadRequest)
	}
	if op.Method != http.MethodGet && strings.HasPrefix(op.Path, "/v1/") {
		// requireJSON answers these before the handler runs.
		add(http.StatusUnsupportedMediaType).Description = "The body is not application/json"
		add(http.StatusBadRequest)
	}
	if strings.HasPrefix(op.Path, "/v1/") {
		r := add(http.StatusServiceUnavailable)
		r.Description = "The database is unavailable or busy; retry after Retry-After seconds"
		r.Headers = map[string]*huma.Header{
			"Retry-After": {Description: "seconds to wait before retrying", Required: true, Schema: &huma.Schema{Type: huma.TypeInteger, Minimum: new(float64(1))}},
		}
	}
	add(http.StatusMisdirectedRequest).Description = "The request's Host is not one this api answers for (BUILDRISK_ALLOWED_HOSTS; without authentication, loopback names unless set)"
	if _, ok := op.Responses["default"]; ok && len(op.Responses) > 2 {
		// Huma's catch-all for an operation without declared errors: now
		// that its errors are listed, list the 500 instead.
		delete(op.Responses, "default")
		add(http.StatusInternalServerError)
	}
}

// humaValidates reports whether Huma can refuse op's input before its
// handler runs: a JSON body, or a parameter that is not a plain string.
func humaValidates(op *huma.Operation) bool {
	if op.RequestBody != nil && op.RequestBody.Content["application/json"] != nil {
		return true
	}
	for _, p := range op.Parameters {
		s := p.Schema
		if s == nil {
			continue
		}
		if s.Type != huma.TypeString || s.Format != "" || s.Pattern != "" || len(s.Enum) > 0 || s.MinLength != nil || s.MaxLength != nil {
			return true
		}
	}
	return false
}

// nullableRefs makes every object-valued field the server sends as null
// nullable in the document. Huma refuses `nullable` on a field whose schema
// is a $ref; in OpenAPI 3.1 such a field is anyOf [the object, null]. A
// field counts when its Go type is a pointer to a struct (not time.Time,
// which is a string) and its JSON tag has no omitempty, so encoding/json
// writes null for nil.
func nullableRefs(oapi *huma.OpenAPI) {
	registry := oapi.Components.Schemas
	for name, schema := range registry.Map() {
		t := registry.TypeFromRef("#/components/schemas/" + name)
		if t == nil || t.Kind() != reflect.Struct || schema.Properties == nil {
			continue
		}
		for _, f := range reflect.VisibleFields(t) {
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || f.Anonymous || tag == "-" || strings.Contains(f.Tag.Get("json"), ",omitempty") {
				continue
			}
			if f.Type.Kind() != reflect.Pointer || f.Type.Elem().Kind() != reflect.Struct || f.Type.Elem() == reflect.TypeFor[time.Time]() {
				continue
			}
			key := cmp.Or(tag, f.Name)
			prop := schema.Properties[key]
			if prop == nil || prop.Ref == "" {
				continue
			}
			schema.Properties[key] = &huma.Schema{
				Description: prop.Description,
				AnyOf:       []*huma.Schema{{Ref: prop.Ref}, {Type: "null"}},
			}
		}
	}
}

// nullableEnums gives every nullable property with an enum a schema of
// its own: a component named after the property (lastDueOutcome ->
// LastDueOutcome) holding the enum as a plain string, and the property
// anyOf [that component, null], the shape nullableRefs gives a nullable
// object. Huma writes such a property as type [string, null] with the enum
// as tagged; under JSON Schema 2020-12 that enum refuses the null the type
// allows (a job never due answers lastDueOutcome: null), and with null
// added to it oapi-codegen generates a constant "<nil>" that its Valid()
// accepts. Every generator reads anyOf [$ref, null] as an optional value of
// the named type.
func nullableEnums(oapi *huma.OpenAPI) {
	components := oapi.Components.Schemas.Map()
	var walk func(s *huma.Schema)
	walk = func(s *huma.Schema) {
		if s == nil {
			return
		}
		for name, p := range s.Properties {
			if p != nil && p.Nullable && len(p.Enum) > 0 {
				s.Properties[name] = nullableEnumRef(components, name, p)
				continue
			}
			walk(p)
		}
		walk(s.Items)
	}
	for _, name := range slices.Sorted(maps.Keys(components)) {
		walk(components[name])
	}
}

// nullableEnumRef registers p's enum (null left out) in components under
// the property's name, upper-cased, and returns anyOf [its $ref, null]
// with p's description. Two properties of one name share the component;
// it panics when their enums differ, a mistake in the api's types.
func nullableEnumRef(components map[string]*huma.Schema, property string, p *huma.Schema) *huma.Schema {
	name := strings.ToUpper(property[:1]) + property[1:]
	enum := slices.DeleteFunc(slices.Clone(p.Enum), func(v any) bool { return v == nil })
	if have, ok := components[name]; ok {
		if !slices.Equal(have.Enum, enum) {
			panic(fmt.Sprintf("api: two nullable enums named %s differ: %v and %v", property, have.Enum, enum))
		}
	} else {
		components[name] = &huma.Schema{Type: huma.TypeString, Enum: enum}
	}
	return &huma.Schema{
		Description: p.Description,
		AnyOf:       []*huma.Schema{{Ref: "#/components/schemas/" + name}, {Type: "null"}},
	}
}

// openAPI30 serves the OpenAPI 3.0 copy of the document: Huma's downgrade,
// then what the downgrade leaves that only 3.1 allows (to30).
func (s *Server) openAPI30(w http.ResponseWriter, r *http.Request) {
	s.openAPI30Once.Do(func() {
		s.openAPI30JSON, s.openAPI30Err = s.api.OpenAPI().Downgrade()
		if s.openAPI30Err == nil {
			s.openAPI30JSON, s.openAPI30Err = to30(s.openAPI30JSON)
		}
		if s.openAPI30Err == nil {
			var yamlDoc bytes.Buffer
			s.openAPI30Err = yaml.Convert(&yamlDoc, bytes.NewReader(s.openAPI30JSON))
			s.openAPI30YAML = yamlDoc.Bytes()
		}
	})
	if s.openAPI30Err != nil {
		http.Error(w, "the OpenAPI 3.0 document could not be made", http.StatusInternalServerError)
		return
	}
	if strings.HasSuffix(r.URL.Path, ".yaml") {
		w.Header().Set("Content-Type", "application/openapi+yaml")
		_, _ = w.Write(s.openAPI30YAML)
		return
	}
	w.Header().Set("Content-Type", "application/openapi+json")
	_, _ = w.Write(s.openAPI30JSON)
}

// to30 rewrites a downgraded document's 3.1-only forms as 3.0 says them:
// the license's SPDX identifier goes (3.0 has none), and a nullable
// reference, anyOf [{$ref}, {type: null}] (nullableRefs), becomes
// allOf [{$ref}] with nullable: true (3.0 has no null type); a $ref
// with sibling keywords is wrapped in allOf (refWithoutSiblings).
func to30(doc []byte) ([]byte, error) {
	var root map[string]any
	if err := json.Unmarshal(doc, &root); err != nil {
		return nil, fmt.Errorf("error reading the downgraded document: %w", err)
	}
	if info, ok := root["info"].(map[string]any); ok {
		if license, ok := info["license"].(map[string]any); ok {
			delete(license, "identifier")
		}
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			refWithoutSiblings(v)
			if anyOf, ok := v["anyOf"].([]any); ok {
				kept := slices.DeleteFunc(slices.Clone(anyOf), func(e any) bool {
					m, ok := e.(map[string]any)
					return ok && len(m) == 1 && m["type"] == "null"
				})
				if len(kept) < len(anyOf) {
					delete(v, "anyOf")
					v["nullable"] = true
					if len(kept) == 1 {
						v["allOf"] = kept
					} else {
						v["anyOf"] = kept
					}
				}
			}
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(root)
	out, err := json.Marshal(root)
	if err != nil {
		return nil, fmt.Errorf("error writing the 3.0 document: %w", err)
	}
	return out, nil
}

// refWithoutSiblings moves a $ref that has sibling keywords (a
// description beside a request body's params) into allOf [{$ref}]:
// OpenAPI 3.0 ignores a $ref's siblings, so 3.0 tools would drop the
// description, and strict 3.0 validators refuse the object.
func refWithoutSiblings(v map[string]any) {
	ref, ok := v["$ref"]
	if !ok || len(v) == 1 {
		return
	}
	delete(v, "$ref")
	v["allOf"] = []any{map[string]any{"$ref": ref}}
}

// withOpenAPI30 answers GET /openapi-3.0.json and .yaml with openAPI30
// instead of Huma's own copy.
func (s *Server) withOpenAPI30(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && (r.URL.Path == "/openapi-3.0.json" || r.URL.Path == "/openapi-3.0.yaml") {
			s.openAPI30(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Handler returns the HTTP handler: the API behind bearer-token (or
// console session) auth and then the body limit, the console, and River UI
// when configured. Auth comes first so that no anonymous body is read.
func (s *Server) Handler() http.Handler {
	inner := s.checkHost(apiHeaders(s.authenticate(s.limitBody(s.requireJSON(s.withDeadline(s.withOpenAPI30(s.mux)))))))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { inner.ServeHTTP(w, s.withClient(r)) })
}

// apiHeaders marks every /v1 answer, refusals included, as one a browser
// must neither sniff into another type nor store.
func apiHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			h := w.Header()
			h.Set("X-Content-Type-Options", "nosniff")
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// withDeadline gives every /v1 call RequestTimeout for its database work:
// a call waiting for a pooled connection (all of them stuck behind a lock,
// or the database gone) ends with 503 instead of hanging.
func (s *Server) withDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/") {
			next.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
		defer cancel()
		if s.cfg.TxSettings != nil {
			ctx = pgtx.WithTxSettings(ctx, *s.cfg.TxSettings)
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	w.Header().Set("Content-Type", "application/json")
	if err := s.pool.Ping(ctx); err != nil {
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, `{"status":"unavailable","reason":"database unreachable"}`)
		return
	}
	_, _ = w.Write([]byte(`{"status":"ready"}`))
}

// Register registers every operation on api; tests reuse it with humatest.
func (s *Server) Register(api huma.API) {
	s.registerJobs(api)
	s.registerRequests(api)
	s.registerWorkers(api)
	s.registerExecutions(api)
	s.registerAlerts(api)
	s.registerProviders(api)
	s.registerCoverage(api)
	s.registerJobHistory(api)
	s.registerAudit(api)
}

// unavailable is the 503 of a database that cannot serve the call now.
func unavailable(detail string) error {
	return huma.ErrorWithHeaders(huma.Error503ServiceUnavailable(detail),
		http.Header{"Retry-After": {strconv.Itoa(RetryAfterSeconds)}})
}

// problemFrom maps a domain error to its HTTP answer, a Problem of the
// error's kind. It is the only place that does so; an error that already is
// a problem (an Idempotency-Key's, from inside the enqueue) is answered as
// it is, and unknown errors are logged and answered with a bare 500.
func (s *Server) problemFrom(ctx context.Context, err error) error {
	var paramErr *catalog.ParamError
	var capErr *request.OverCapError
	var dupErr *request.DuplicateError
	var problem *Problem
	var conflict *ConflictError
	switch {
	case errors.As(err, &conflict):
		return conflict
	case errors.As(err, &problem):
		return problem
	case errors.As(err, &capErr) && errors.As(err, &paramErr):
		return newProblem(ProblemCapExceeded, fmt.Sprintf("invalid request: %s: %s", paramErr.Field, paramErr.Message),
			&huma.ErrorDetail{Location: "body." + paramErr.Field, Message: paramErr.Message})
	case errors.As(err, &paramErr):
		return badInput("request", paramErr.Field, "body."+paramErr.Field, paramErr.Message)
	case errors.As(err, &dupErr):
		return newConflict(ProblemDuplicateActiveRequest, fmt.Sprintf("job %s already has an active request %d", dupErr.Job, dupErr.ActiveRequestID), dupErr.ActiveRequestID)
	case errors.Is(err, request.ErrUnknownJob):
		return huma.Error404NotFound(err.Error())
	case errors.Is(err, queries.ErrNotFound):
		return huma.Error404NotFound("not found")
	case errors.Is(err, context.Canceled):
		return huma.NewError(499, "client closed request")
	case pgtx.IsTransient(err):
		s.cfg.Logger.WarnContext(ctx, "database unavailable; answered 503", slog.String("error", err.Error()))
		s.cfg.Instruments.HTTPRefused(ctx, observability.RefusalUnavailable)
		return unavailable("the database is unavailable or busy (restarting, out of connections, or a statement or lock timed out); retry shortly")
	default:
		s.cfg.Logger.ErrorContext(ctx, "internal error", slog.String("error", err.Error()))
		return huma.Error500InternalServerError("internal error; see the server log")
	}
}

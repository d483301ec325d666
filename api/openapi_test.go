package api_test

import (
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/buildrisk/radar/api"
	"github.com/buildrisk/radar/internal/jobset"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queue/request"
)

// openAPIOut makes TestOpenAPIDocument write the served document to a file:
// `make openapi-lint` lints that file with Redocly's CLI.
var openAPIOut = flag.String("openapi.out", "", "write the served OpenAPI document (JSON) to this file")

// servedOpenAPI returns the document the API serves at /openapi.json. No
// database is needed: building the document touches none.
func servedOpenAPI(t *testing.T) []byte {
	t.Helper()
	server := documentServer(t, nil)
	rec := httptest.NewRecorder()
	server.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	return rec.Body.Bytes()
}

// documentServer returns an api server with no database and the given
// tokens (nil: none), enough to serve its documents and refusals: building
// and answering them touches none.
func documentServer(t *testing.T, tokens map[string]api.Role) *api.Server {
	t.Helper()
	instruments, err := observability.NewInstruments(noop.NewMeterProvider())
	require.NoError(t, err)
	catalog := jobset.Catalog()
	enqueuer, err := request.NewOwner(nil, nil, request.Config{Catalog: catalog, Instruments: instruments})
	require.NoError(t, err)
	server, err := api.New(nil, api.Config{Catalog: catalog, AlertRules: riskrule.Doc(), Requests: enqueuer, Instruments: instruments, Version: "test", Tokens: tokens})
	require.NoError(t, err)
	return server
}

// openAPIDoc is the part of an OpenAPI document the test reads.
type openAPIDoc struct {
	Info struct {
		License *struct {
			Name       string `json:"name"`
			Identifier string `json:"identifier"`
			URL        string `json:"url"`
		} `json:"license"`
		Contact *struct {
			Name string `json:"name"`
		} `json:"contact"`
	} `json:"info"`
	Servers []struct {
		URL string `json:"url"`
	} `json:"servers"`
	Components struct {
		Schemas map[string]json.RawMessage `json:"schemas"`
	} `json:"components"`
	Paths map[string]map[string]struct {
		OperationID string                `json:"operationId"`
		Security    []map[string][]string `json:"security"`
		Parameters  []struct {
			Name string `json:"name"`
			In   string `json:"in"`
		} `json:"parameters"`
		Responses map[string]json.RawMessage `json:"responses"`
	} `json:"paths"`
}

// The served document has what generated clients and linters look for:
// servers, a license and a contact, and on every operation at least one
// 4xx; an operation that needs a token documents 401, a POST also 403;
// and no operation documents Huma's 422, which this API answers as 400:
// only the operations that take an Idempotency-Key document a 422, the
// key's reuse for another request.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()

	data := servedOpenAPI(t)
	var doc openAPIDoc
	require.NoError(t, json.Unmarshal(data, &doc))

	require.NotEmpty(t, doc.Servers, "servers")
	for _, s := range doc.Servers {
		require.NotEmpty(t, s.URL)
	}
	require.NotNil(t, doc.Info.License, "info.license")
	require.NotEmpty(t, doc.Info.License.Name)
	require.True(t, doc.Info.License.Identifier != "" || doc.Info.License.URL != "", "a license has an identifier or a URL")
	require.NotNil(t, doc.Info.Contact, "info.contact")
	require.NotEmpty(t, doc.Info.Contact.Name)

	// paramsSchema is plain JSON Schema, not Huma's Go struct (which
	// generated clients cannot build: it refers to itself).
	require.NotContains(t, doc.Components.Schemas, "Schema")
	require.Contains(t, doc.Components.Schemas, "ConflictError")
	// Each job's params schema is named after the job (schemaNamer), not
	// after the Go type that carries its params: generated clients name
	// their types after these.
	for _, name := range []string{"CorpCodeSyncParams", "FilingParseParams", "StockPriceParams", "AptTradeParams",
		"CreditEvalParams", "MetricsParams", "RulesParams"} {
		require.Contains(t, doc.Components.Schemas, name)
	}

	require.NotEmpty(t, doc.Paths)
	for path, item := range doc.Paths {
		for method, op := range item {
			where := method + " " + path
			has4xx := false
			for code := range op.Responses {
				n, err := strconv.Atoi(code)
				has4xx = has4xx || err == nil && n >= 400 && n < 500
			}
			require.True(t, has4xx, "%s documents no 4xx response", where)
			takesKey := false
			for _, p := range op.Parameters {
				takesKey = takesKey || p.In == "header" && p.Name == api.IdempotencyKeyHeader
			}
			if takesKey {
				require.Contains(t, string(op.Responses["422"]), "idempotency-key-reused", where)
			} else {
				require.NotContains(t, op.Responses, "422", "%s: the API answers schema violations with 400", where)
			}
			if len(op.Security) > 0 {
				require.Contains(t, op.Responses, "401", where)
				if method != "get" {
					require.Contains(t, op.Responses, "403", where)
				}
			}
			if method != "get" {
				require.Contains(t, op.Responses, "413", where)
			}
			if strings.HasPrefix(path, "/v1/") {
				require.Contains(t, op.Responses, "503", where)
				require.Contains(t, string(op.Responses["503"]), `"Retry-After"`, where)
			}
		}
	}

	if *openAPIOut != "" {
		require.NoError(t, os.WriteFile(*openAPIOut, data, 0o644))
	}
}

// The documented errors are real: an operation that needs a token answers
// 401 without one and a viewer's POST 403, before any handler (or database)
// is reached; and the bodies Huma writes carry no undocumented member.
func TestOpenAPIDocument_ErrorsAreServed(t *testing.T) {
	t.Parallel()

	server := documentServer(t, map[string]api.Role{"v": api.RoleViewer})
	for _, r := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "/v1/jobs", nil),
		httptest.NewRequest(http.MethodPost, "/v1/jobs/aptTrade/stop", nil),
	} {
		rec := httptest.NewRecorder()
		server.Handler().ServeHTTP(rec, r)
		require.Equal(t, http.StatusUnauthorized, rec.Code, r.URL.Path)
	}
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/v1/jobs/aptTrade/stop", nil)
	r.Header.Set("Authorization", "Bearer v")
	server.Handler().ServeHTTP(rec, r)
	require.Equal(t, http.StatusForbidden, rec.Code, "a viewer's POST")

	// A body Huma writes is exactly the documented shape: no $schema link.
	rec = httptest.NewRecorder()
	r = httptest.NewRequest(http.MethodGet, "/v1/jobs/noSuchJob", nil)
	r.Header.Set("Authorization", "Bearer v")
	server.Handler().ServeHTTP(rec, r)
	require.Equal(t, http.StatusNotFound, rec.Code, rec.Body.String())
	require.NotContains(t, rec.Body.String(), "$schema")
}

// The OpenAPI 3.0 copy (/openapi-3.0.json, for 3.0-only tools) is a valid
// 3.0 document: in particular no license identifier, which only 3.1 knows
// (before, the copy carried it and the OAS 3.0 schema refused it).
func TestOpenAPIDocument_30CopyIsValid30(t *testing.T) {
	t.Parallel()
	server := documentServer(t, nil)
	for _, path := range []string{"/openapi-3.0.json", "/openapi-3.0.yaml"} {
		rec := httptest.NewRecorder()
		server.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		require.Equal(t, http.StatusOK, rec.Code, path)
		doc, err := openapi3.NewLoader().LoadFromData(rec.Body.Bytes())
		require.NoError(t, err, path)
		require.True(t, strings.HasPrefix(doc.OpenAPI, "3.0."), "%s: openapi %s", path, doc.OpenAPI)
		require.NoError(t, doc.Validate(context.Background()), path)
		require.NotNil(t, doc.Info.License, path)
		require.NotContains(t, rec.Body.String(), "LicenseRef-", "%s: a license identifier is OpenAPI 3.1's", path)
	}
}

// refSiblings returns the JSON paths of doc's $ref objects that carry
// other keywords: OpenAPI 3.0 ignores a $ref's siblings (a description
// beside one is lost to 3.0 tools, and strict 3.0 validators refuse it).
func refSiblings(t *testing.T, doc []byte) []string {
	t.Helper()
	var root any
	require.NoError(t, json.Unmarshal(doc, &root))
	var found []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if _, ok := v["$ref"]; ok && len(v) > 1 {
				found = append(found, path)
			}
			for k, e := range v {
				walk(path+"/"+k, e)
			}
		case []any:
			for i, e := range v {
				walk(path+"/"+strconv.Itoa(i), e)
			}
		}
	}
	walk("#", root)
	return found
}

// The 3.0 copy has no $ref object with a sibling keyword (before, the
// per-job request bodies carried a description beside their $ref).
func TestOpenAPIDocument_30CopyHasNoRefSiblings(t *testing.T) {
	t.Parallel()
	server := documentServer(t, nil)
	rec := httptest.NewRecorder()
	server.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi-3.0.json", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	siblings := refSiblings(t, rec.Body.Bytes())
	t.Logf("%d $ref objects with siblings", len(siblings))
	require.Empty(t, siblings)
}

// The 3.1 document's server variables carry only enum and default:
// @apidevtools/swagger-parser (and so orval 7) refuses any other keyword of
// a 3.1 server variable, a description included ("must NOT have
// unevaluated properties"). TestTSClientWalkthrough runs swagger-parser
// itself; this is the check that needs no Node.js.
func TestOpenAPIDocument_ServerVariablesSwaggerParserAccepts(t *testing.T) {
	t.Parallel()
	var doc struct {
		Servers []struct {
			Variables map[string]map[string]json.RawMessage `json:"variables"`
		} `json:"servers"`
	}
	require.NoError(t, json.Unmarshal(servedOpenAPI(t), &doc))
	for _, server := range doc.Servers {
		for name, variable := range server.Variables {
			for keyword := range variable {
				require.Contains(t, []string{"default", "enum"}, keyword, "server variable %s", name)
			}
		}
	}
}

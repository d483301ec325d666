package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"
)

// limitCase is one value that breaks one limit the OpenAPI schema declares.
type limitCase struct {
	field string // body.<field> as the 400 names it
	limit string // which keyword it breaks
	value any
}

// schemaViolations returns, for every limit schema declares on a property
// of an object (recursing into arrays' items), a value that breaks it.
// example supplies valid values to build arrays from.
func schemaViolations(resolve func(map[string]any) map[string]any, schema map[string]any, prefix string, example map[string]any) []limitCase {
	var cases []limitCase
	props, _ := resolve(schema)["properties"].(map[string]any)
	for name, raw := range props {
		prop := resolve(raw.(map[string]any))
		field := prefix + name
		if field == "params" {
			continue // walked by the caller
		}
		cases = append(cases, violationsOf(prop, field, example[name])...)
		if items, ok := prop["items"].(map[string]any); ok {
			for _, c := range violationsOf(resolve(items), field+"[0]", nil) {
				cases = append(cases, limitCase{field: c.field, limit: "items." + c.limit, value: []any{c.value}})
			}
		}
	}
	return cases
}

func violationsOf(prop map[string]any, field string, example any) []limitCase {
	var cases []limitCase
	items := func(n int) []any {
		list, _ := example.([]any)
		out := make([]any, n)
		for i := range out {
			if len(list) > 0 {
				out[i] = list[i%len(list)]
			} else {
				out[i] = "00000000"
			}
		}
		return out
	}
	if v, ok := prop["maxItems"].(float64); ok {
		cases = append(cases, limitCase{field, "maxItems", items(int(v) + 1)})
	}
	if v, ok := prop["minItems"].(float64); ok && v > 0 {
		cases = append(cases, limitCase{field, "minItems", items(int(v) - 1)})
	}
	if v, ok := prop["maximum"].(float64); ok {
		cases = append(cases, limitCase{field, "maximum", int64(v) + 1})
	}
	if v, ok := prop["minimum"].(float64); ok {
		cases = append(cases, limitCase{field, "minimum", int64(v) - 1})
	}
	if v, ok := prop["maxLength"].(float64); ok {
		cases = append(cases, limitCase{field, "maxLength", strings.Repeat("0", int(v)+1)})
	}
	if v, ok := prop["minLength"].(float64); ok && v > 0 {
		cases = append(cases, limitCase{field, "minLength", strings.Repeat("0", int(v)-1)})
	}
	if p, ok := prop["pattern"].(string); ok {
		re := regexp.MustCompile(p)
		for _, bad := range []string{"x", "+1", "2025-1", "1e3"} {
			if !re.MatchString(bad) {
				cases = append(cases, limitCase{field, "pattern", bad})
				break
			}
		}
	}
	return cases
}

// Every limit the OpenAPI document declares on a request body is enforced:
// the test walks the generated schema of each job's POST body, breaks each
// limit in turn (on an otherwise valid example) and requires a 400 naming
// the field.
func TestLimits_EverySchemaLimitIsEnforced(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	status, doc := s.Do(http.MethodGet, "/openapi.json", "", "")
	require.Equal(t, http.StatusOK, status)
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	resolve := func(schema map[string]any) map[string]any {
		if ref, ok := schema["$ref"].(string); ok {
			return schemas[strings.TrimPrefix(ref, "#/components/schemas/")].(map[string]any)
		}
		return schema
	}
	var checked []string
	for path, item := range doc["paths"].(map[string]any) {
		post, ok := item.(map[string]any)["post"].(map[string]any)
		if !ok || !strings.HasSuffix(path, "/requests") || strings.Contains(path, "{") {
			continue
		}
		content := post["requestBody"].(map[string]any)["content"].(map[string]any)["application/json"].(map[string]any)
		body := resolve(content["schema"].(map[string]any))
		example, _ := content["example"].(map[string]any)["params"].(map[string]any)
		if example == nil {
			example = map[string]any{}
		}
		cases := schemaViolations(resolve, body, "", example)
		paramsSchema := resolve(body["properties"].(map[string]any)["params"].(map[string]any))
		cases = append(cases, schemaViolations(resolve, paramsSchema, "params.", example)...)
		for _, c := range cases {
			params := map[string]any{}
			for k, v := range example {
				params[k] = v
			}
			req := map[string]any{"params": params}
			if name, ok := strings.CutPrefix(c.field, "params."); ok {
				params[strings.Split(name, "[")[0]] = c.value
			} else {
				req[c.field] = c.value
			}
			raw, err := json.Marshal(req)
			require.NoError(t, err)
			status, out := s.Post(path, string(raw))
			require.Equal(t, http.StatusBadRequest, status, "%s %s %s: %v", path, c.field, c.limit, out)
			require.Contains(t, fmt.Sprint(out["detail"]), strings.Split(c.field, "[")[0], "%s %s: the 400 names the field", path, c.limit)
			checked = append(checked, path+" "+c.field+" "+c.limit)
		}
	}
	sort.Strings(checked)
	t.Logf("%d limits checked:\n%s", len(checked), strings.Join(checked, "\n"))
	for _, want := range []string{
		"/v1/jobs/aptTrade/requests params.regions maxItems",
		"/v1/jobs/aptTrade/requests params.regions minItems",
		"/v1/jobs/aptTrade/requests params.from pattern",
		"/v1/jobs/filingParse/requests params.corpCodes maxItems",
		"/v1/jobs/stockPrice/requests params.date pattern",
		"/v1/jobs/creditEval/requests maxCalls maximum",
		"/v1/jobs/creditEval/requests maxCalls minimum",
	} {
		require.Contains(t, checked, want)
	}
}

// The holes of the hostile-input review, one by one.
func TestLimits_Regressions(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	for _, maxCalls := range []string{"2147483648", "4294967297", "1000001", "0", "-1", "1e30", "1.5"} {
		status, out := s.Post("/v1/jobs/aptTrade/requests", `{"maxCalls":`+maxCalls+`,"params":{"regions":["11110"],"from":"2025-01","to":"2025-01"}}`)
		require.Equal(t, http.StatusBadRequest, status, "maxCalls %s: %v", maxCalls, out)
		require.Contains(t, out["detail"], "maxCalls", maxCalls)
	}
	for _, month := range []string{"0000-01", "9999-12", "2005-12", "2025-13"} {
		status, out := s.Post("/v1/jobs/aptTrade/requests", apptest.AptTradeBody([]string{"11110"}, month, month))
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", month, out)
		require.Contains(t, out["detail"], "params.from")
	}
	for _, date := range []string{"0000-01-01", "9999-12-31", "2005-12-31"} {
		status, out := s.Post("/v1/jobs/stockPrice/requests", `{"params":{"date":"`+date+`"}}`)
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", date, out)
		require.Contains(t, out["detail"], "params.date")
	}
	regions := make([]string, 501)
	for i := range regions {
		regions[i] = fmt.Sprintf("%05d", 11000+i)
	}
	status, out := s.Post("/v1/jobs/aptTrade/requests", apptest.AptTradeBody(regions, "2025-01", "2025-01"))
	require.Equal(t, http.StatusBadRequest, status, "%v", out)
	require.Contains(t, out["detail"], "params.regions")

	// maxCalls at its bound is stored as given.
	id := s.RequestAptTrade(`{"maxCalls":1000000,"params":{"regions":["11110"],"from":"2025-01","to":"2025-01"}}`)
	status, got := s.Get("/v1/requests/" + id)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, float64(1000000), got["maxCalls"])

	// Ids are strict decimal.
	for _, bad := range []string{"+" + id, "0" + id, id + ".0", "%20" + id, "0x1"} {
		status, out := s.Get("/v1/requests/" + bad)
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", bad, out)
		require.Contains(t, out["detail"], "id")
		status, _ = s.Post("/v1/executions/"+bad+"/abandon", "")
		require.Equal(t, http.StatusBadRequest, status, bad)
	}
	for _, bad := range []string{"+1", "1.0", "%201"} {
		status, _ := s.Get("/v1/requests?limit=" + bad)
		require.Equal(t, http.StatusBadRequest, status, bad)
	}

	// The auth scheme is case-insensitive; the token is not.
	for scheme, want := range map[string]int{"bearer": 200, "BEARER": 200, "Bearer": 200, "Basic": 401, "": 401} {
		req, err := http.NewRequest(http.MethodGet, s.API.URL+"/v1/jobs", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", strings.TrimSpace(scheme+" "+apptest.ViewerToken))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, scheme)
	}
	status, _ = s.Do(http.MethodGet, "/v1/jobs", strings.ToUpper(apptest.ViewerToken), "")
	require.Equal(t, http.StatusUnauthorized, status)
}

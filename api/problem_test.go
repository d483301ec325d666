package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/api"
)

// Every problem type is a page of the api that needs no token (a type is
// its own documentation), and the list of them is one too; a name outside
// the set is not found.
func TestProblemTypes_EachIsAPage(t *testing.T) {
	t.Parallel()
	server := documentServer(t, map[string]api.Role{"v": api.RoleViewer})
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		server.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		body, err := io.ReadAll(rec.Result().Body)
		require.NoError(t, err)
		require.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"), path)
		return rec.Code, string(body)
	}
	status, index := get("/problems/")
	require.Equal(t, http.StatusOK, status)
	require.Len(t, api.ProblemTypes(), 20)
	for _, pt := range api.ProblemTypes() {
		require.Regexp(t, `^/problems/[a-z]+(-[a-z]+)*$`, string(pt))
		require.Contains(t, index, `href="`+string(pt)+`"`)
		status, page := get(string(pt))
		require.Equal(t, http.StatusOK, status, pt)
		require.Contains(t, page, "status: "+strconv.Itoa(pt.Status()), pt)
	}
	status, _ = get("/problems/no-such-problem")
	require.Equal(t, http.StatusNotFound, status)
}

// readmeProblemRowRE matches a row of the README's problem type table.
var readmeProblemRowRE = regexp.MustCompile("(?m)^\\| `(/problems/[a-z-]+)` \\| (\\d{3}) \\|")

// The README's table of problem types is the closed set, each with its
// status: a client reads the set there.
func TestProblemTypes_TheReadmeListsTheSet(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	got := map[string]string{}
	for _, m := range readmeProblemRowRE.FindAllStringSubmatch(string(readme), -1) {
		got[m[1]] = m[2]
	}
	want := map[string]string{}
	for _, pt := range api.ProblemTypes() {
		want[string(pt)] = strconv.Itoa(pt.Status())
	}
	require.Equal(t, want, got, "README.md's problem type table differs from api.ProblemTypes")
}

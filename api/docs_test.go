package api_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/api"
)

// /docs works with no network: the page references no other host (no
// absolute or protocol-relative URL, a CSP of 'self' only), and every
// script, stylesheet and document it loads is served by the api itself,
// without a token.
func TestDocs_Offline(t *testing.T) {
	t.Parallel()
	server := documentServer(t, map[string]api.Role{"v": api.RoleViewer})
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		server.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec
	}

	rec := get("/docs")
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Header().Get("Content-Type"), "text/html")
	page := rec.Body.String()
	require.NotRegexp(t, `(?i)(https?:)?//[a-z0-9]`, page, "the page names another host")
	csp := rec.Header().Get("Content-Security-Policy")
	require.Contains(t, csp, "script-src 'self'")
	require.NotRegexp(t, `(?i)https?:|//`, csp, "the CSP allows another host")

	refs := regexp.MustCompile(`(?:src|href|apiDescriptionUrl)="([^"]+)"`).FindAllStringSubmatch(page, -1)
	require.Len(t, refs, 4, "stylesheet, icon, renderer, the script that loads the document")
	want := map[string]string{".js": "javascript", ".css": "text/css", ".ico": "image/", ".json": "json"}
	// The script loads the document from /openapi.json.
	for _, ref := range append(refs, []string{"", "/openapi.json"}) {
		path := ref[1]
		require.True(t, strings.HasPrefix(path, "/"), "%s is not a path on this api", path)
		rec := get(path)
		require.Equal(t, http.StatusOK, rec.Code, path)
		require.Greater(t, rec.Body.Len(), 100, path)
		for ext, ct := range want {
			if strings.HasSuffix(path, ext) {
				require.Contains(t, rec.Header().Get("Content-Type"), ct, path)
			}
		}
	}
}

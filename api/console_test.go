package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/api"
)

func sessionCookie(t *testing.T, resp *http.Response) *http.Cookie {
	t.Helper()
	for _, c := range resp.Cookies() {
		if c.Name == api.SessionCookieName || c.Name == api.SessionCookieNameTLS {
			return c
		}
	}
	t.Fatalf("no %s cookie in %v", api.SessionCookieName, resp.Header.Values("Set-Cookie"))
	return nil
}

// Login with a token sets an HttpOnly, SameSite=Strict session cookie (not
// Secure over plain HTTP); the cookie then authenticates the API, and its
// POSTs need the page's CSRF token and a same-origin browser.
func TestConsole_Session(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	c := apptest.NewConsoleClient(t, s.API)

	resp, _ := c.Send(http.MethodGet, "/", "", "", nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "no session: to the login page")
	require.Equal(t, "/login", resp.Header.Get("Location"))
	resp, body := c.Send(http.MethodGet, "/login", "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `name="token"`)

	resp = c.Login("wrong-token")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Empty(t, resp.Cookies())
	resp, _ = c.Send(http.MethodGet, "/v1/jobs", "", "", nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	resp = c.Login(apptest.OperatorToken)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/", resp.Header.Get("Location"))
	cookie := sessionCookie(t, resp)
	require.True(t, cookie.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, cookie.SameSite)
	require.False(t, cookie.Secure, "plain HTTP")
	require.NotContains(t, cookie.Value, apptest.OperatorToken, "the cookie never carries the token")

	body = c.Page()
	require.Contains(t, body, `data-role="operator"`)
	require.Contains(t, body, `id="request-form"`)
	require.Contains(t, body, `href="/riverui/"`)
	require.Contains(t, body, `id="audit"`, "operators see the audit trail")
	require.Contains(t, body, `id="logout-everywhere"`)
	require.NotContains(t, body, `class="deadline"`, "no job has a deadline: no Deadline column")

	resp, _ = c.Send(http.MethodGet, "/v1/jobs", "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the cookie authenticates GETs")

	stop := "/v1/jobs/aptTrade/stop"
	resp, body = c.Send(http.MethodPost, stop, "application/json", "", nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")
	require.Contains(t, body, "X-CSRF-Token")
	resp, _ = c.Send(http.MethodPost, stop, "application/json", "", map[string]string{"X-CSRF-Token": c.CSRF + "x"})
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "wrong CSRF token")
	resp, _ = c.Send(http.MethodPost, stop, "application/json", "", map[string]string{"X-CSRF-Token": c.CSRF, "Sec-Fetch-Site": "cross-site"})
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "a cross-site request is refused even with the token")
	resp, _ = c.Send(http.MethodPost, stop, "application/json", "", map[string]string{"X-CSRF-Token": c.CSRF, "Origin": "http://evil.example"})
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "another origin is refused")
	resp, body = c.Send(http.MethodPost, stop, "application/json", "", map[string]string{"X-CSRF-Token": c.CSRF, "Sec-Fetch-Site": "same-origin"})
	require.Equal(t, http.StatusConflict, resp.StatusCode, "past auth: nothing runs, %s", body)

	// Bearer auth is unchanged: a wrong bearer token is refused even with a
	// valid session cookie, and a bearer POST needs no CSRF token.
	resp, _ = c.Send(http.MethodGet, "/v1/jobs", "", "", map[string]string{"Authorization": "Bearer wrong"})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = c.Send(http.MethodPost, stop, "application/json", "", map[string]string{"Authorization": "Bearer " + apptest.OperatorToken})
	require.Equal(t, http.StatusConflict, resp.StatusCode)

	// Logout needs the CSRF token, then deletes the cookie.
	resp, _ = c.Send(http.MethodPost, "/logout", "application/x-www-form-urlencoded", "csrf=wrong", nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, _ = c.Send(http.MethodPost, "/logout", "application/x-www-form-urlencoded", url.Values{"csrf": {c.CSRF}}.Encode(), nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Less(t, sessionCookie(t, resp).MaxAge, 0, "the cookie is deleted")
	resp, _ = c.Send(http.MethodGet, "/v1/jobs", "", "", nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// next after login is only ever a clean local path: a control character,
// a backslash, a scheme or a host after parsing sends the user to "/". A
// browser strips tabs and newlines, so "/<TAB>/evil.example" would land on
// evil.example.
func TestConsole_LoginNextStaysLocal(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	c := apptest.NewConsoleClient(t, s.API)
	hostile := []string{
		"/\t/evil.example", "/\n/evil.example", "/\r//evil.example", "/\x00/evil.example",
		"//evil.example", "/\\evil.example", "\\/evil.example", "/\x7f/evil.example",
		"https://evil.example/", "javascript:alert(1)", "/%2F/evil.example", " /evil.example",
	}
	check := func(resp *http.Response, next string) {
		t.Helper()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, "%q", next)
		require.Equal(t, "/", resp.Header.Get("Location"), "next %q", next)
	}
	for _, next := range hostile {
		resp, _ := c.Send(http.MethodPost, "/login", "application/x-www-form-urlencoded", url.Values{"token": {apptest.OperatorToken}, "next": {next}}.Encode(), nil)
		check(resp, next)
		resp, _ = c.Send(http.MethodGet, "/login?next="+url.QueryEscape(next), "", "", nil)
		check(resp, next) // logged in: straight to next
	}
	resp, _ := c.Send(http.MethodGet, "/login?next=/%09/evil.example", "", "", nil)
	check(resp, "the issue's /%09/evil.example")
	resp, _ = c.Send(http.MethodGet, "/login?next="+url.QueryEscape("/riverui/?q=1#top"), "", "", nil)
	require.Equal(t, "/riverui/?q=1#top", resp.Header.Get("Location"), "a clean local path is kept")
}

// A viewer's console has no form and no River UI link, and the API refuses
// its POSTs even with the CSRF token.
func TestConsole_Viewer(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	c := apptest.NewConsoleClient(t, s.API)
	require.Equal(t, http.StatusSeeOther, c.Login(apptest.ViewerToken).StatusCode)
	body := c.Page()
	require.Contains(t, body, `data-role="viewer"`)
	require.NotContains(t, body, `id="request-form"`)
	require.NotContains(t, body, "/riverui/")
	require.NotContains(t, body, `id="audit"`, "the audit trail is for operators")
	resp, _ := c.Send(http.MethodPost, "/v1/jobs/aptTrade/requests", "application/json", apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"),
		map[string]string{"X-CSRF-Token": c.CSRF})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Equal(t, 0, s.Count("SELECT count(*) FROM job_request"))
}

// Over TLS the session cookie is Secure; a login from another origin is
// refused.
func TestConsole_SecureCookieAndCrossOriginLogin(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	tlsServer := httptest.NewTLSServer(s.API.Config.Handler)
	t.Cleanup(tlsServer.Close)
	c := apptest.NewConsoleClient(t, tlsServer)
	resp := c.Login(apptest.OperatorToken)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.True(t, sessionCookie(t, resp).Secure)

	plain := apptest.NewConsoleClient(t, s.API)
	resp, _ = plain.Send(http.MethodPost, "/login", "application/x-www-form-urlencoded", url.Values{"token": {apptest.OperatorToken}}.Encode(),
		map[string]string{"Sec-Fetch-Site": "cross-site"})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Empty(t, resp.Cookies())

	// Behind a proxy that terminates TLS and says so.
	resp, _ = plain.Send(http.MethodPost, "/login", "application/x-www-form-urlencoded", url.Values{"token": {apptest.OperatorToken}}.Encode(),
		map[string]string{"X-Forwarded-Proto": "https"})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.True(t, sessionCookie(t, resp).Secure)
}

// With auth off (BUILDRISK_INSECURE_NO_AUTH=1) the console needs no login
// and acts as an operator, like the API.
func TestConsole_InsecureNoAuth(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_INSECURE_NO_AUTH": "1"}})
	c := apptest.NewConsoleClient(t, s.API)
	resp, body := c.Send(http.MethodGet, "/", "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `data-role="operator"`)
	require.NotContains(t, body, `action="/logout"`, "nothing to log out of")
	resp, _ = c.Send(http.MethodGet, "/login", "", "", nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "no login page either")
	resp, _ = c.Send(http.MethodGet, "/riverui/", "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// POST /v1/jobs/{job}/estimate validates like a request and answers the
// estimate, writing no row; with nothing to resume, the whole run's.
func TestConsole_Estimate(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_DAILY_CAP_MOLIT": "10"}})

	status, out := s.Post("/v1/jobs/aptTrade/estimate", apptest.AptTradeBody([]string{"11110", "11140"}, "2025-01", "2025-03"))
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.Equal(t, map[string]any{"job": "aptTrade", "estimatedCalls": float64(6), "resumesExecutionId": nil}, withoutSchema(out))

	status, out = s.Post("/v1/jobs/aptTrade/estimate", apptest.AptTradeBody([]string{"11110"}, "2025-13", "2025-03"))
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, out["detail"], "params.from")
	require.Equal(t, "body.params.from", out["errors"].([]any)[0].(map[string]any)["location"])

	status, out = s.Post("/v1/jobs/aptTrade/estimate", `{"params":{"regions":["11110"],"from":"2025-01","to":"2025-01"},"maxCalls":0}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, out["detail"], "maxCalls")

	status, out = s.Post("/v1/jobs/aptTrade/estimate", `{"params":{},"bogus":1}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, out["detail"], "bogus")

	status, out = s.Post("/v1/jobs/aptTrade/estimate", apptest.AptTradeBody([]string{"11110", "11140"}, "2025-01", "2025-06"))
	require.Equal(t, http.StatusBadRequest, status, "12 calls exceed the cap of 10")
	require.Contains(t, out["detail"], "daily cap")

	status, _ = s.Post("/v1/jobs/nope/estimate", `{"params":{}}`)
	require.Equal(t, http.StatusNotFound, status)
	status, _ = s.Do(http.MethodPost, "/v1/jobs/aptTrade/estimate", apptest.ViewerToken, apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	require.Equal(t, http.StatusForbidden, status)

	require.Equal(t, 0, s.Count("SELECT count(*) FROM job_request"), "an estimate writes no request")
	require.Equal(t, 0, s.Count("SELECT count(*) FROM river_job"), "nor a River job")

	// The same body as a request: the same estimate.
	status, out = s.Post("/v1/jobs/aptTrade/requests", apptest.AptTradeBody([]string{"11110", "11140"}, "2025-01", "2025-03"))
	require.Equal(t, http.StatusAccepted, status)
	require.Equal(t, float64(6), out["estimatedCalls"])
}

// withoutSchema drops Huma's $schema link from an answer.
func withoutSchema(out map[string]any) map[string]any {
	delete(out, "$schema")
	return out
}

// GET /v1/providers shows each provider's cap, today's use and what is left.
func TestConsole_Providers(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_DAILY_CAP_MOLIT": "100"}})
	s.StartWorker()
	done := s.WaitRequest(s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-03")), "DONE", "FAILED")
	require.Equal(t, "DONE", done["status"])

	status, out := s.Get("/v1/providers")
	require.Equal(t, http.StatusOK, status)
	byName := map[string]map[string]any{}
	for _, p := range out["providers"].([]any) {
		byName[p.(map[string]any)["provider"].(string)] = p.(map[string]any)
	}
	require.ElementsMatch(t, []string{"CREDIT", "DART", "KRX", "MOLIT"}, apptest.Keys(byName))
	molit := byName["MOLIT"]
	require.Equal(t, float64(3), molit["usedToday"])
	require.Equal(t, float64(100), molit["dailyCap"])
	require.Equal(t, float64(97), molit["remaining"])
	require.Equal(t, []any{"aptTrade"}, molit["jobs"])
	require.Equal(t, float64(0), byName["DART"]["usedToday"])
}

// /riverui/ answers 401 (a browser: a redirect to the login page) without an
// operator, 403 to a viewer, and the UI to an operator, by bearer token or
// console session.
func TestConsole_RiverUI(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	anon := apptest.NewConsoleClient(t, s.API)

	resp, _ := anon.Send(http.MethodGet, "/riverui/", "", "", nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = anon.Send(http.MethodGet, "/riverui/api/jobs?state=available", "", "", nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "River UI's API too")
	resp, _ = anon.Send(http.MethodGet, "/riverui/", "", "", map[string]string{"Accept": "text/html"})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/login?next="+url.QueryEscape("/riverui/"), resp.Header.Get("Location"))

	resp, _ = anon.Send(http.MethodGet, "/riverui/", "", "", map[string]string{"Authorization": "Bearer " + apptest.ViewerToken})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	resp, body := anon.Send(http.MethodGet, "/riverui/", "", "", map[string]string{"Authorization": "Bearer " + apptest.OperatorToken})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "River")
	require.Contains(t, body, "/riverui/assets/", "the SPA's assets under the prefix")

	viewer := apptest.NewConsoleClient(t, s.API)
	viewer.Login(apptest.ViewerToken)
	resp, _ = viewer.Send(http.MethodGet, "/riverui/", "", "", nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	op := apptest.NewConsoleClient(t, s.API)
	require.Equal(t, http.StatusSeeOther, op.Login(apptest.OperatorToken).StatusCode)
	resp, _ = op.Send(http.MethodGet, "/riverui/", "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	resp, body = op.Send(http.MethodGet, "/riverui/api/jobs?state=available", "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `"kind":"buildrisk_run"`, "River UI lists the request's River job")

	// Login from River UI's redirect comes back to it.
	back := apptest.NewConsoleClient(t, s.API)
	resp, _ = back.Send(http.MethodPost, "/login", "application/x-www-form-urlencoded",
		url.Values{"token": {apptest.OperatorToken}, "next": {"/riverui/"}}.Encode(), nil)
	require.Equal(t, "/riverui/", resp.Header.Get("Location"))
}

// River UI is read-only: its own API's mutations (cancel, delete, retry,
// queue pause) are refused with 403 naming the service's operation to use
// instead, and nothing about the request, its execution or its River job
// changes; the run then completes as if nobody had clicked. Its pages
// cannot be framed.
func TestConsole_RiverUIMutationsRefused(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	s.Gate.Arm(0)
	s.StartWorker()
	id := s.RequestAptTrade(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	<-s.Gate.Blocked // the run is at the provider
	var riverJobID int64
	require.NoError(t, s.Pool.QueryRow(context.Background(), "SELECT river_job_id FROM job_request WHERE id = $1", id).Scan(&riverJobID))

	op := apptest.NewConsoleClient(t, s.API)
	bearer := map[string]string{"Authorization": "Bearer " + apptest.OperatorToken}
	resp, _ := op.Send(http.MethodGet, "/riverui/", "", "", bearer)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")

	jobIDs := fmt.Sprintf(`{"job_ids":["%d"]}`, riverJobID)
	for _, call := range []struct{ method, path, body, names string }{
		{http.MethodPost, "/riverui/api/jobs/cancel", jobIDs, "/v1/jobs/{job}/stop"},
		{http.MethodPost, "/riverui/api/jobs/delete", jobIDs, "reaper"},
		{http.MethodPost, "/riverui/api/jobs/retry", jobIDs, "/v1/jobs/{job}/requests"},
		{http.MethodPut, "/riverui/api/queues/default/pause", "", "/v1/jobs/{job}/stop"},
		{http.MethodPatch, "/riverui/api/queues/default", `{}`, "/v1/jobs/{job}/stop"},
	} {
		resp, body := op.Send(call.method, call.path, "application/json", call.body, bearer)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s %s: %s", call.method, call.path, body)
		require.Contains(t, body, "River UI is read-only")
		require.Contains(t, body, call.names, "%s %s names the operation to use", call.method, call.path)
	}
	var refused int
	require.NoError(t, s.APIPool.QueryRow(context.Background(),
		"SELECT count(*) FROM audit_event WHERE action = 'riverui_write_refused' AND actor LIKE 'fp-%' AND client = '127.0.0.1'").Scan(&refused))
	require.Equal(t, 5, refused, "each refused River UI mutation is in the audit trail, with who and from where")
	var requestStatus, riverState string
	var cancelAttempted bool
	require.NoError(t, s.Pool.QueryRow(context.Background(),
		"SELECT r.status, j.state::text, j.metadata ? 'cancel_attempted_at' FROM job_request r JOIN river_job j ON j.id = r.river_job_id WHERE r.id = $1", id).
		Scan(&requestStatus, &riverState, &cancelAttempted))
	require.Equal(t, "RUNNING", requestStatus)
	require.Equal(t, "completed", riverState, "the River job ended at the claim; the request tracks the run")
	require.False(t, cancelAttempted, "River never heard of the cancel")

	s.Gate.Open()
	out := s.WaitRequest(id, "DONE", "FAILED")
	require.Equal(t, "DONE", out["status"])
	require.Equal(t, "COMPLETED", apptest.Execution(t, out)["status"])
	require.Equal(t, 1, s.Count("SELECT count(*) FROM job_request"), "no resume, no second run")
}

// With auth off (BUILDRISK_INSECURE_NO_AUTH=1) a browser on another site
// still cannot act: the cross-origin check stays, and a body must be
// application/json (a cross-site form or text/plain POST needs no
// preflight). Every JSON endpoint refuses another type (415) and duplicate
// keys (400), with or without auth.
func TestConsole_InsecureKeepsCrossOriginAndJSON(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_INSECURE_NO_AUTH": "1"}})
	c := apptest.NewConsoleClient(t, s.API)
	body := apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01")
	for _, header := range []map[string]string{{"Sec-Fetch-Site": "cross-site"}, {"Origin": "http://evil.example"}} {
		resp, out := c.Send(http.MethodPost, "/v1/jobs/aptTrade/requests", "application/json", body, header)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "%v: %s", header, out)
		resp, _ = c.Send(http.MethodPost, "/v1/jobs/aptTrade/stop", "", "", header)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "%v", header)
	}
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""} {
		resp, out := c.Send(http.MethodPost, "/v1/jobs/aptTrade/requests", ct, body, nil)
		require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode, "%q: %s", ct, out)
		require.Contains(t, out, "application/json")
	}
	resp, out := c.Send(http.MethodPost, "/v1/jobs/aptTrade/requests", "application/json",
		`{"params":{"regions":["11110"],"from":"2025-01","to":"2025-01","to":"2025-12"}}`, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, out)
	require.Contains(t, out, "duplicate")
	require.Contains(t, out, "params.to")
	require.Equal(t, 0, s.Count("SELECT count(*) FROM job_request"), "nothing was requested")

	resp, out = c.Send(http.MethodPost, "/v1/jobs/aptTrade/requests", "application/json; charset=utf-8", body, nil)
	require.Equal(t, http.StatusAccepted, resp.StatusCode, out)

	// With auth on, the same rules for a bearer caller.
	authed := apptest.New(t, nil)
	bearer := map[string]string{"Authorization": "Bearer " + apptest.OperatorToken}
	ac := apptest.NewConsoleClient(t, authed.API)
	resp, out = ac.Send(http.MethodPost, "/v1/jobs/aptTrade/estimate", "text/plain", body, bearer)
	require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode, out)
	resp, out = ac.Send(http.MethodPost, "/v1/jobs/aptTrade/estimate", "application/json", `{"params":{},"params":{}}`, bearer)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, out)
}

// Logout ends the session on the server: the cookie, copied before, is
// useless after it (on /v1 and on the console). "Sign out everywhere" ends
// every session of every browser at once.
func TestConsole_LogoutRevokesTheSession(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	withCookie := func(value, path string) int {
		req, err := http.NewRequest(http.MethodGet, s.API.URL+path, nil)
		require.NoError(t, err)
		req.AddCookie(&http.Cookie{Name: api.SessionCookieName, Value: value})
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	c := apptest.NewConsoleClient(t, s.API)
	copied := sessionCookie(t, c.Login(apptest.OperatorToken)).Value
	require.Equal(t, http.StatusOK, withCookie(copied, "/v1/jobs"))
	c.Page()
	resp, _ := c.Send(http.MethodPost, "/logout", "application/x-www-form-urlencoded", url.Values{"csrf": {c.CSRF}}.Encode(), nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, http.StatusUnauthorized, withCookie(copied, "/v1/jobs"), "the copied cookie no longer works")
	require.Equal(t, http.StatusSeeOther, withCookie(copied, "/"), "the console sends it to the login page")

	a, b := apptest.NewConsoleClient(t, s.API), apptest.NewConsoleClient(t, s.API)
	cookieA := sessionCookie(t, a.Login(apptest.OperatorToken)).Value
	cookieB := sessionCookie(t, b.Login(apptest.ViewerToken)).Value
	require.Equal(t, http.StatusOK, withCookie(cookieB, "/v1/jobs"))
	a.Page()
	resp, _ = a.Send(http.MethodPost, "/logout", "application/x-www-form-urlencoded", url.Values{"csrf": {a.CSRF}, "everywhere": {"1"}}.Encode(), nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, http.StatusUnauthorized, withCookie(cookieA, "/v1/jobs"))
	require.Equal(t, http.StatusUnauthorized, withCookie(cookieB, "/v1/jobs"), "signed out everywhere")
	require.Equal(t, http.StatusSeeOther, apptest.NewConsoleClient(t, s.API).Login(apptest.OperatorToken).StatusCode, "a new login works")
}

// "Sign out everywhere" ends every session only for an operator: a viewer
// ends the sessions of its own token, never an operator's.
func TestConsole_ViewerSignsOutOnlyItsOwnSessions(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	withCookie := func(value string) int {
		req, err := http.NewRequest(http.MethodGet, s.API.URL+"/v1/jobs", nil)
		require.NoError(t, err)
		req.AddCookie(&http.Cookie{Name: api.SessionCookieName, Value: value})
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return resp.StatusCode
	}
	operator := sessionCookie(t, apptest.NewConsoleClient(t, s.API).Login(apptest.OperatorToken)).Value
	otherViewer := sessionCookie(t, apptest.NewConsoleClient(t, s.API).Login(apptest.ViewerToken)).Value
	v := apptest.NewConsoleClient(t, s.API)
	viewer := sessionCookie(t, v.Login(apptest.ViewerToken)).Value
	require.Contains(t, v.Page(), "Sign out all my sessions")
	resp, _ := v.Send(http.MethodPost, "/logout", "application/x-www-form-urlencoded", url.Values{"csrf": {v.CSRF}, "everywhere": {"1"}}.Encode(), nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, http.StatusUnauthorized, withCookie(viewer), "the viewer is signed out")
	require.Equal(t, http.StatusUnauthorized, withCookie(otherViewer), "and so is its token's other session")
	require.Equal(t, http.StatusOK, withCookie(operator), "an operator's session is not the viewer's to end")
}

// The low findings: a bad static path is a 4xx, not a 500; /v1 answers
// (refusals included) are nosniff and no-store; over TLS the session
// cookie is __Host- prefixed (Secure, Path=/, no Domain), so a sibling
// host cannot plant one, and the unprefixed name is not read there.
func TestConsole_LowFindings(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	for _, path := range []string{"/static/%ff", "/static/%c0%af", "/static/..%2f..%2fetc%2fpasswd", "/static/a%00b"} {
		resp, err := http.Get(s.API.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.GreaterOrEqual(t, resp.StatusCode, 400, path)
		require.Less(t, resp.StatusCode, 500, path)
	}
	for _, token := range []string{apptest.ViewerToken, ""} {
		req, err := http.NewRequest(http.MethodGet, s.API.URL+"/v1/jobs", nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), "token %q", token)
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"), "token %q", token)
	}

	tlsServer := httptest.NewTLSServer(s.API.Config.Handler)
	t.Cleanup(tlsServer.Close)
	c := apptest.NewConsoleClient(t, tlsServer)
	resp := c.Login(apptest.OperatorToken)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == api.SessionCookieNameTLS {
			cookie = ck
		}
	}
	require.NotNil(t, cookie, "over TLS the cookie is %s: %v", api.SessionCookieNameTLS, resp.Header.Values("Set-Cookie"))
	require.True(t, cookie.Secure)
	require.Equal(t, "/", cookie.Path)
	require.Empty(t, cookie.Domain)
	get := func(name, value string) int {
		req, err := http.NewRequest(http.MethodGet, tlsServer.URL+"/v1/jobs", nil)
		require.NoError(t, err)
		req.AddCookie(&http.Cookie{Name: name, Value: value})
		resp, err := (&http.Client{Transport: tlsServer.Client().Transport}).Do(req) // no jar
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, get(api.SessionCookieNameTLS, cookie.Value))
	require.Equal(t, http.StatusUnauthorized, get(api.SessionCookieName, cookie.Value), "over TLS only the __Host- cookie counts")
}

// The right token logs in whatever the next it comes with: a next of 4.3
// KB (a River UI deep link) lands on its path, its query dropped; a River
// UI link longer than MaxNextBytes still lands after login; a form the
// server cannot read is answered 413 or 400 with the reason, never as a
// wrong token, and never audited as a failed login.
func TestConsole_LoginWithALongNext(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	longQuery := "state=available&q=" + strings.Repeat("x", 4300)

	c := apptest.NewConsoleClient(t, s.API)
	resp, body := c.Send(http.MethodPost, "/login", "application/x-www-form-urlencoded",
		url.Values{"token": {apptest.OperatorToken}, "next": {"/riverui/jobs?" + longQuery}}.Encode(), nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	require.Equal(t, "/riverui/jobs", resp.Header.Get("Location"), "the query is dropped, the path kept")

	anon := apptest.NewConsoleClient(t, s.API)
	resp, _ = anon.Send(http.MethodGet, "/riverui/jobs?"+longQuery, "", "", map[string]string{"Accept": "text/html"})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	loginURL, err := url.Parse(resp.Header.Get("Location"))
	require.NoError(t, err)
	next := loginURL.Query().Get("next")
	require.LessOrEqual(t, len(next), api.MaxNextBytes)
	require.Equal(t, "/riverui/jobs", next)
	resp, _ = anon.Send(http.MethodGet, loginURL.RequestURI(), "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = anon.Send(http.MethodPost, "/login", "application/x-www-form-urlencoded",
		url.Values{"token": {apptest.OperatorToken}, "next": {next}}.Encode(), nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/riverui/jobs", resp.Header.Get("Location"))

	tooBig := url.Values{"token": {apptest.OperatorToken}, "next": {"/" + strings.Repeat("y", 64<<10)}}.Encode()
	resp, body = anon.Send(http.MethodPost, "/login", "application/x-www-form-urlencoded", tooBig, nil)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	require.Contains(t, body, "login form is over")
	resp, body = anon.Send(http.MethodPost, "/login", "application/x-www-form-urlencoded", "token=%zz&next=/", nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "login form could not be read")
	var failed int
	require.NoError(t, s.APIPool.QueryRow(context.Background(), "SELECT count(*) FROM audit_event WHERE action = 'login_failed'").Scan(&failed))
	require.Zero(t, failed, "no failed login recorded")

	// The logout form the same way: an oversized one is a 413, not a
	// missing CSRF token.
	resp, body = anon.Send(http.MethodPost, "/logout", "application/x-www-form-urlencoded", "csrf=x&pad="+strings.Repeat("z", 8<<10), nil)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, body)
	require.Contains(t, body, "logout form is over")
}

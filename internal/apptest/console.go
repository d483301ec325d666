package apptest

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// ConsoleClient is a browser-like client of the console: it keeps cookies
// and does not follow redirects, so a test sees each answer.
type ConsoleClient struct {
	t    *testing.T
	Base string
	http *http.Client
	CSRF string
}

// NewConsoleClient returns a client of server's console with a cookie jar of
// its own: two of them are two browsers.
func NewConsoleClient(t *testing.T, server *httptest.Server) *ConsoleClient {
	t.Helper()
	// server.Client() is one client per server: a copy, so that each
	// console client keeps its own cookies.
	client := new(http.Client)
	*client = *server.Client()
	client.Jar = NewJar(t)
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &ConsoleClient{t: t, Base: server.URL, http: client}
}

func NewJar(t *testing.T) http.CookieJar {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return jar
}

// Send sends a request with the given headers; body is sent as is.
func (c *ConsoleClient) Send(method, path, contentType, body string, header map[string]string) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.Base+path, strings.NewReader(body))
	require.NoError(c.t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return resp, string(raw)
}

// Login posts the login form and returns the answer.
func (c *ConsoleClient) Login(token string) *http.Response {
	c.t.Helper()
	resp, _ := c.Send(http.MethodPost, "/login", "application/x-www-form-urlencoded", url.Values{"token": {token}}.Encode(), nil)
	return resp
}

var CsrfMeta = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`)

// Page loads the console and remembers its CSRF token.
func (c *ConsoleClient) Page() string {
	c.t.Helper()
	resp, body := c.Send(http.MethodGet, "/", "", "", nil)
	require.Equal(c.t, http.StatusOK, resp.StatusCode, body)
	m := CsrfMeta.FindStringSubmatch(body)
	require.NotNil(c.t, m, "the page carries the CSRF token")
	c.CSRF = m[1]
	return body
}

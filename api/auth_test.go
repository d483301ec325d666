package api

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// long makes a token of the minimum strength from a short label.
func long(label string) string { return label + strings.Repeat("x", TokenMinLength-len(label)) }

func TestParseTokens(t *testing.T) {
	t.Parallel()
	tokens, names, err := ParseTokens("viewer:" + long("v1") + ", operator:" + long("o1") + ",viewer:" + long("v2"))
	require.NoError(t, err)
	require.Equal(t, map[string]Role{long("v1"): RoleViewer, long("o1"): RoleOperator, long("v2"): RoleViewer}, tokens)
	require.Regexp(t, `^fp-[0-9a-f]{8}$`, names[long("o1")], "no name given: a fingerprint")
	require.NotEqual(t, names[long("v1")], names[long("v2")])

	for _, bad := range []string{"", "admin:" + long("x"), "viewer", "viewer:", ",", "operator:short", "operator:alice:short", "operator:bad name:" + long("x")} {
		_, _, err := ParseTokens(bad)
		require.Error(t, err, bad)
		require.NotContains(t, err.Error(), "short", "the error never quotes a token")
	}
}

// role:name:token entries name their token; the name is what requests and
// the audit record, never the token.
func TestParseTokens_Named(t *testing.T) {
	t.Parallel()
	tokens, names, err := ParseTokens("operator:alice:" + long("a") + "\nviewer:ci-bot:" + long("b") + "\noperator:" + long("c:with:colons"))
	require.NoError(t, err)
	require.Equal(t, RoleOperator, tokens[long("a")])
	require.Equal(t, "alice", names[long("a")])
	require.Equal(t, "ci-bot", names[long("b")])
	_, _, err = ParseTokens("operator:" + strings.Repeat("y", TokenMinLength-1))
	require.ErrorContains(t, err, "at least 32 characters")
}
func TestParseID(t *testing.T) {
	t.Parallel()
	id, ok := parseID("42")
	require.True(t, ok)
	require.Equal(t, int64(42), id)
	for _, bad := range []string{"", "0", "-1", "+1", "01", " 1", "1e3", "0x1", "abc", "1.5", "99999999999999999999"} {
		_, ok := parseID(bad)
		require.False(t, ok, bad)
	}
}

// A tokens file: one entry a line, comments, several tokens per role (for
// rotation); a token with two roles is refused.
func TestParseTokens_File(t *testing.T) {
	t.Parallel()
	tokens, _, err := ParseTokens("# rotated 2026-11-30\noperator:" + long("new-op") + "\noperator:" + long("old-op") + "\n\nviewer:" + long("v1") + ",viewer:" + long("v2") + "\n")
	require.NoError(t, err)
	require.Equal(t, map[string]Role{long("new-op"): RoleOperator, long("old-op"): RoleOperator, long("v1"): RoleViewer, long("v2"): RoleViewer}, tokens)
	_, _, err = ParseTokens("operator:" + long("same") + "\nviewer:" + long("same"))
	require.ErrorContains(t, err, "entry 2")
}

func TestBearerToken(t *testing.T) {
	t.Parallel()
	for header, want := range map[string]string{"Bearer t1": "t1", "bearer t1": "t1", "BEARER  t1 ": "t1"} {
		got, ok := bearerToken(header)
		require.True(t, ok, header)
		require.Equal(t, want, got, header)
	}
	for _, bad := range []string{"", "Bearer", "Basic t1", "Bearert1", "t1"} {
		_, ok := bearerToken(bad)
		require.False(t, ok, bad)
	}
}

// Any path id: accepted only as the canonical decimal form of a positive
// int64, which is what formatID writes.
func FuzzParseID(f *testing.F) {
	for _, s := range []string{"1", "+1", "01", "-1", "0", "9223372036854775807", "9223372036854775808", " 1", "1_000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, ok := parseID(s)
		if ok && (id <= 0 || formatID(id) != s) {
			t.Fatalf("parseID(%q) = %d, accepted but not canonical", s, id)
		}
	})
}

// clientAddr believes X-Forwarded-For only from a trusted proxy, reads it
// from the right past the trusted proxies, and stops at a malformed entry;
// limitKey keys an IPv6 client by its /64.
func TestClientAddr(t *testing.T) {
	t.Parallel()
	s := &Server{cfg: Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}}}
	for _, c := range []struct {
		peer      string
		forwarded []string
		want      string
	}{
		{"192.0.2.1:5000", []string{"198.51.100.1"}, "192.0.2.1"},                           // not a proxy: ignored
		{"10.0.0.5:5000", nil, "10.0.0.5"},                                                  // a proxy without the header
		{"10.0.0.5:5000", []string{"198.51.100.1"}, "198.51.100.1"},                         // one proxy
		{"10.0.0.5:5000", []string{"203.0.113.9, 198.51.100.1, 10.2.3.4"}, "198.51.100.1"},  // the client forged the first
		{"10.0.0.5:5000", []string{"203.0.113.9", "198.51.100.1,10.2.3.4"}, "198.51.100.1"}, // several header lines
		{"10.0.0.5:5000", []string{"198.51.100.1:4711"}, "198.51.100.1"},                    // with a port
		{"10.0.0.5:5000", []string{"198.51.100.1, garbage"}, "10.0.0.5"},                    // malformed: the proxy
		{"10.0.0.5:5000", []string{"10.9.9.9"}, "10.9.9.9"},                                 // only proxies: the first
		{"[::1]:5000", []string{"[2001:db8::7]:80"}, "2001:db8::7"},
		{"[::ffff:10.0.0.5]:5000", []string{"::ffff:198.51.100.1"}, "198.51.100.1"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = c.peer
		for _, v := range c.forwarded {
			r.Header.Add("X-Forwarded-For", v)
		}
		require.Equal(t, c.want, s.clientAddr(r), "%s %v", c.peer, c.forwarded)
	}
	r := s.withClient(httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, "192.0.2.1", limitKey(r))
	r.RemoteAddr = "[::1]:1"
	r.Header.Set("X-Forwarded-For", "2001:db8:1:2:3:4:5:6")
	require.Equal(t, "2001:db8:1:2::/64", limitKey(s.withClient(r)))
}

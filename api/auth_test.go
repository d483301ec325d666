package api

import (
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

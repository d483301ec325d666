package api

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseTokens(t *testing.T) {
	t.Parallel()
	tokens, err := ParseTokens("viewer:v1, operator:o1,viewer:v2")
	require.NoError(t, err)
	require.Equal(t, map[string]Role{"v1": RoleViewer, "o1": RoleOperator, "v2": RoleViewer}, tokens)

	for _, bad := range []string{"", "admin:x", "viewer", "viewer:", ","} {
		_, err := ParseTokens(bad)
		require.Error(t, err, bad)
	}
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
	tokens, err := ParseTokens("# rotated 2026-11-30\noperator:new-op\noperator:old-op\n\nviewer:v1,viewer:v2\n")
	require.NoError(t, err)
	require.Equal(t, map[string]Role{"new-op": RoleOperator, "old-op": RoleOperator, "v1": RoleViewer, "v2": RoleViewer}, tokens)
	_, err = ParseTokens("operator:same\nviewer:same")
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

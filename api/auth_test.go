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
	for _, bad := range []string{"", "0", "-1", "abc", "1.5", "99999999999999999999"} {
		_, ok := parseID(bad)
		require.False(t, ok, bad)
	}
}

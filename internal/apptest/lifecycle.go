package apptest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

var SixRegions = []string{"11110", "11140", "11170", "11200", "11215", "11230"}

// RequireEachKeyOnce asserts the fake upstream saw every aptTrade
// combination exactly once: no committed chunk was fetched again.
func RequireEachKeyOnce(t *testing.T, s *System, want int) {
	t.Helper()
	calls := s.CallsPerKey("aptTrade")
	require.Len(t, calls, want)
	for key, n := range calls {
		require.Equal(t, int64(1), n, "combination %s fetched %d times", key, n)
	}
}

func Keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

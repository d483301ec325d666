package api

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// utcTimes converts every time.Time an answer holds, wherever it is (a
// field, behind a pointer, in a list, a map or an interface), and copies
// what it changes instead of writing to the handler's values.
func TestUTCTimes(t *testing.T) {
	t.Parallel()
	seoul := time.FixedZone("KST", 9*3600)
	at := time.Date(2026, 12, 8, 6, 0, 0, 0, seoul)
	type inner struct {
		At    time.Time
		Maybe *time.Time
	}
	type body struct {
		Inner  inner
		List   []*inner
		ByName map[string]any
		Names  []string
		hidden time.Time
	}
	shared := &inner{At: at, Maybe: &at}
	in := &body{Inner: *shared, List: []*inner{shared, nil}, ByName: map[string]any{"at": at, "n": 1}, Names: []string{"a"}, hidden: at}

	out, err := utcTimes(nil, "200", in)
	require.NoError(t, err)
	got := out.(*body)
	for _, tm := range []time.Time{got.Inner.At, *got.Inner.Maybe, got.List[0].At, *got.List[0].Maybe, got.ByName["at"].(time.Time)} {
		require.Equal(t, time.UTC, tm.Location())
		require.True(t, tm.Equal(at))
	}
	require.Nil(t, got.List[1])
	require.Equal(t, 1, got.ByName["n"])
	require.Equal(t, []string{"a"}, got.Names)

	// The handler's values are untouched.
	require.Equal(t, seoul, shared.At.Location())
	require.Equal(t, seoul, shared.Maybe.Location())
	require.Equal(t, seoul, in.ByName["at"].(time.Time).Location())
	require.Equal(t, seoul, in.Inner.At.Location())

	// Nothing to change: the same value back.
	utc := &inner{At: at.UTC()}
	same, err := utcTimes(nil, "200", utc)
	require.NoError(t, err)
	require.Same(t, utc, same)
}

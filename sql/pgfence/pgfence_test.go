package pgfence_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/sql/pgfence"
)

// A fence refuses a read-write server of a known system on a timeline
// below the highest seen, never a standby, and never another system.
func TestFence_Observe(t *testing.T) {
	t.Parallel()
	f := pgfence.New()
	require.NoError(t, f.Observe(pgfence.Identity{SystemIdentifier: 7, Timeline: 1}))
	require.NoError(t, f.Observe(pgfence.Identity{SystemIdentifier: 7, Timeline: 2}))
	require.Equal(t, int64(2), f.Highest(7))

	old := pgfence.Identity{Host: "db-a:5432", SystemIdentifier: 7, Timeline: 1}
	var stale *pgfence.StaleError
	require.ErrorAs(t, f.Observe(old), &stale)
	require.Equal(t, int64(2), stale.Highest)
	require.True(t, f.Stale(old))
	require.Contains(t, stale.Error(), "db-a:5432")

	require.NoError(t, f.Observe(pgfence.Identity{SystemIdentifier: 7, Timeline: 1, InRecovery: true}), "a lagging standby takes no writes")
	require.NoError(t, f.Observe(pgfence.Identity{SystemIdentifier: 8, Timeline: 1}), "another system")
	require.NoError(t, f.Observe(pgfence.Identity{SystemIdentifier: 7, Timeline: 2}))
	require.Equal(t, int64(2), f.Highest(7))
}

// Two read-write hosts of one system are a split brain; a standby beside
// a primary, or primaries of two systems, are not.
func TestSplitBrain(t *testing.T) {
	t.Parallel()
	a := pgfence.Identity{Host: "a", SystemIdentifier: 7, Timeline: 1}
	b := pgfence.Identity{Host: "b", SystemIdentifier: 7, Timeline: 2}
	standby := pgfence.Identity{Host: "b", SystemIdentifier: 7, Timeline: 1, InRecovery: true}
	other := pgfence.Identity{Host: "c", SystemIdentifier: 8, Timeline: 1}

	require.Empty(t, pgfence.SplitBrain([]pgfence.Identity{a, standby}))
	require.Empty(t, pgfence.SplitBrain([]pgfence.Identity{a, other}))
	require.Equal(t, map[int64][]pgfence.Identity{7: {a, b}}, pgfence.SplitBrain([]pgfence.Identity{a, b, other}))
}

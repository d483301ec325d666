package pack_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/deploy/pack"
)

// The committed files under deploy/ are what the pack renders: a rule or
// panel changed in Go but not regenerated (make generate), or a generated
// file edited by hand, fails here.
func TestFilesCurrent(t *testing.T) {
	t.Parallel()

	files, err := pack.Files()
	require.NoError(t, err)
	require.Len(t, files, 3)
	for path, want := range files {
		got, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(path)))
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "%s is not current: run make generate", path)
	}
}

// Rendering is deterministic: two renderings are byte for byte the same,
// so the check above cannot flap.
func TestFilesDeterministic(t *testing.T) {
	t.Parallel()

	a, err := pack.Files()
	require.NoError(t, err)
	b, err := pack.Files()
	require.NoError(t, err)
	require.Equal(t, a, b)
}

// Every rule has what both outputs need: a name, an expression, a
// severity, a summary and a description, and a Grafana query window.
func TestRulesComplete(t *testing.T) {
	t.Parallel()

	names := map[string]bool{}
	for _, r := range pack.Rules {
		require.NotEmpty(t, r.Alert)
		require.False(t, names[r.Alert], "duplicate alert %s", r.Alert)
		names[r.Alert] = true
		require.NotEmpty(t, r.Expr, r.Alert)
		require.Contains(t, []pack.Severity{pack.Critical, pack.Warning}, r.Severity, r.Alert)
		require.NotEmpty(t, r.Summary, r.Alert)
		require.NotEmpty(t, r.Description, r.Alert)
		require.Positive(t, r.Grafana.From, r.Alert)
	}
}

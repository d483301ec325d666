package app_test

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/jobset"
	"github.com/buildrisk/radar/queue/batch"
)

// The catalog lists every job once, in the order the job list, the CLI
// and the API show them, under the names URLs, metrics and the CLI use;
// each job's example and scheduled params are valid params of its own.
func TestCatalog_RadarJobsInOrder(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"corpCodeSync", "filingParse", "stockPrice", "aptTrade", "creditEval", "metrics", "rules"},
		jobset.Catalog().Names())
	for _, def := range jobset.Catalog().All() {
		_, err := def.Decode(mustJSON(t, def.Example()))
		require.NoError(t, err, "%s's example is valid", def.Name())
		_, err = def.Decode(def.ScheduledParams(time.Date(2026, 3, 31, 18, 0, 0, 0, catalog.Seoul)))
		require.NoError(t, err, "%s's scheduled params are valid", def.Name())
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return raw
}

// Each job is registered once, and everything a process knows of it comes
// from that registration: the catalog lists exactly the registered jobs,
// each has an implementation, and the estimates that need the database are
// those of the three jobs whose targets only the database knows.
func TestJobs_OneRegistrationPerJob(t *testing.T) {
	t.Parallel()
	regs := app.Jobs(&config.Config{}, nil)
	names := make([]string, len(regs))
	for i, r := range regs {
		names[i] = r.Definition.Name()
		require.NotNil(t, r.Job, names[i])
	}
	require.Equal(t, jobset.Catalog().Names(), names)
	require.Len(t, batch.Implementations(regs), len(regs))
	require.ElementsMatch(t, []string{"filingParse", "stockPrice", "creditEval"}, slices.Collect(maps.Keys(batch.Estimators(regs))))
}

package batch_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
)

// A list of registrations yields the catalog (in order), the runner's
// implementations and the enqueuer's database estimates (only the jobs
// that have one).
func TestRegistration_DerivedMaps(t *testing.T) {
	t.Parallel()
	type none struct{}
	estimate := func(context.Context, queries.DBTX, *catalog.Params) (int, error) { return 7, nil }
	first, second := &noopJob{name: "first"}, &noopJob{name: "second"}
	regs := []batch.Registration{
		{Definition: &catalog.Spec[none]{JobName: "first"}, Job: first},
		{Definition: &catalog.Spec[none]{JobName: "second"}, Job: second, Estimate: estimate},
	}
	require.Equal(t, []string{"first", "second"}, batch.Catalog(regs).Names())
	impls := batch.Implementations(regs)
	require.Len(t, impls, 2)
	require.Same(t, first, impls["first"])
	require.Same(t, second, impls["second"])
	estimators := batch.Estimators(regs)
	require.Len(t, estimators, 1)
	n, err := estimators["second"](context.Background(), nil, nil)
	require.NoError(t, err)
	require.Equal(t, 7, n)
	require.Panics(t, func() { batch.Catalog(append(regs, regs[0])) }, "a job registered twice")
}

// noopJob is a Job that plans nothing; name tells two apart.
type noopJob struct{ name string }

func (*noopJob) Plan(context.Context, *batch.Run) (*batch.Plan, error) { return &batch.Plan{}, nil }

func (*noopJob) Process(context.Context, *batch.Run, string) (*batch.ChunkResult, error) {
	return &batch.ChunkResult{}, nil
}

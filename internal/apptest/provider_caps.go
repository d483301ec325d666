package apptest

import (
	"context"
	"maps"
	"net/http"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/upstream"
)

// StartWorkerWithCaps starts a worker whose environment differs from the
// api's in its daily caps: caps replace the api's values.
func (s *System) StartWorkerWithCaps(caps map[upstream.Provider]int) string {
	s.T.Helper()
	env := *s.Env
	env.DailyCaps = maps.Clone(s.Env.DailyCaps)
	maps.Copy(env.DailyCaps, caps)
	w, err := app.NewWorker(s.Pool, &env, s.Tel, app.WorkerOptions{})
	require.NoError(s.T, err)
	require.NoError(s.T, w.Start(context.Background()))
	s.T.Cleanup(func() { _ = w.Stop(context.Background()) })
	return w.ID()
}

// Provider returns one provider of GET /v1/providers.
func (s *System) Provider(name string) map[string]any {
	s.T.Helper()
	status, out := s.Get("/v1/providers")
	require.Equal(s.T, http.StatusOK, status, "%v", out)
	for _, p := range out["providers"].([]any) {
		if p := p.(map[string]any); p["provider"] == name {
			return p
		}
	}
	s.T.Fatalf("no provider %s in %v", name, out)
	return nil
}

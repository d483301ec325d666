package main

import (
	"context"
	"maps"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/upstream"
)

// startWorkerWithCaps starts a worker whose environment differs from the
// api's in its daily caps: caps replace the api's values.
func (s *testSystem) startWorkerWithCaps(caps map[upstream.Provider]int) string {
	s.t.Helper()
	env := *s.env
	env.DailyCaps = maps.Clone(s.env.DailyCaps)
	maps.Copy(env.DailyCaps, caps)
	id, hostname, boot := app.NewWorkerID()
	w, _, err := app.NewWorker(s.pool, &env, s.tel, id, hostname, boot, nil)
	require.NoError(s.t, err)
	require.NoError(s.t, w.Start(context.Background()))
	s.t.Cleanup(func() { _ = w.Drain(context.Background()) })
	return id
}

// provider returns one provider of GET /v1/providers.
func (s *testSystem) provider(name string) map[string]any {
	s.t.Helper()
	status, out := s.get("/v1/providers")
	require.Equal(s.t, http.StatusOK, status, "%v", out)
	for _, p := range out["providers"].([]any) {
		if p := p.(map[string]any); p["provider"] == name {
			return p
		}
	}
	s.t.Fatalf("no provider %s in %v", name, out)
	return nil
}

// GET /v1/providers shows the cap the workers enforce, not the api's own
// BUILDRISK_DAILY_CAP_<P>: a worker started with a KRX cap of 320 makes it
// 320 while the api runs with the default 10,000; when live workers
// disagree it names the worker whose cap it shows and lists each one's.
func TestProviders_CapIsTheWorkersCap(t *testing.T) {
	t.Parallel()
	s := newTestSystem(t, nil)
	require.Equal(t, upstream.DailyCapDefaults[upstream.ProviderKRX], s.env.DailyCaps[upstream.ProviderKRX], "the api runs with the default cap")

	krx := s.provider("KRX")
	require.Equal(t, float64(upstream.DailyCapDefaults[upstream.ProviderKRX]), krx["dailyCap"], "no live worker: the api's own setting")
	require.Equal(t, "api", krx["capSource"])

	first := s.startWorkerWithCaps(map[upstream.Provider]int{upstream.ProviderKRX: 320})
	krx = s.provider("KRX")
	require.Equal(t, float64(320), krx["dailyCap"], "%v", krx)
	require.Equal(t, float64(320), krx["remaining"])
	require.Equal(t, "workers", krx["capSource"])
	require.NotContains(t, krx, "capReportedBy", "one worker: nothing to disagree on")
	require.Equal(t, float64(upstream.DailyCapDefaults[upstream.ProviderMOLIT]), s.provider("MOLIT")["dailyCap"])

	second := s.startWorkerWithCaps(map[upstream.Provider]int{upstream.ProviderKRX: 500})
	krx = s.provider("KRX")
	require.Equal(t, float64(500), krx["dailyCap"], "the highest cap: calls go on until it")
	require.Equal(t, second, krx["capReportedBy"])
	require.ElementsMatch(t, []any{
		map[string]any{"workerId": first, "dailyCap": float64(320)},
		map[string]any{"workerId": second, "dailyCap": float64(500)},
	}, krx["capsByWorker"])
	require.NotContains(t, s.provider("MOLIT"), "capReportedBy", "the workers agree on MOLIT")
}

package app_test

import (
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/upstream"
)

// GET /v1/providers shows the cap the workers enforce, not the api's own
// BUILDRISK_DAILY_CAP_<P>: a worker started with a KRX cap of 320 makes it
// 320 while the api runs with the default 10,000; when live workers
// disagree it names the worker whose cap it shows and lists each one's.
func TestProviders_CapIsTheWorkersCap(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	require.Equal(t, upstream.DailyCapDefaults[upstream.ProviderKRX], s.Env.DailyCaps[upstream.ProviderKRX], "the api runs with the default cap")

	krx := s.Provider("KRX")
	require.Equal(t, float64(upstream.DailyCapDefaults[upstream.ProviderKRX]), krx["dailyCap"], "no live worker: the api's own setting")
	require.Equal(t, "api", krx["capSource"])

	first := s.StartWorkerWithCaps(map[upstream.Provider]int{upstream.ProviderKRX: 320})
	krx = s.Provider("KRX")
	require.Equal(t, float64(320), krx["dailyCap"], "%v", krx)
	require.Equal(t, float64(320), krx["remaining"])
	require.Equal(t, "workers", krx["capSource"])
	require.NotContains(t, krx, "capReportedBy", "one worker: nothing to disagree on")
	require.Equal(t, float64(upstream.DailyCapDefaults[upstream.ProviderMOLIT]), s.Provider("MOLIT")["dailyCap"])

	second := s.StartWorkerWithCaps(map[upstream.Provider]int{upstream.ProviderKRX: 500})
	krx = s.Provider("KRX")
	require.Equal(t, float64(500), krx["dailyCap"], "the highest cap: calls go on until it")
	require.Equal(t, second, krx["capReportedBy"])
	require.ElementsMatch(t, []any{
		map[string]any{"workerId": first, "dailyCap": float64(320)},
		map[string]any{"workerId": second, "dailyCap": float64(500)},
	}, krx["capsByWorker"])
	require.NotContains(t, s.Provider("MOLIT"), "capReportedBy", "the workers agree on MOLIT")
}

// Every provider's budget says when it resets: resetsAt is the next
// midnight in BUILDRISK_TIMEZONE after the budget day, and used and cap
// are the day's calls and its cap.
func TestProviders_ResetsAtTheNextMidnight(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	for _, p := range upstream.Providers {
		view := s.Provider(string(p))
		day, err := time.ParseInLocation(time.DateOnly, view["day"].(string), s.Env.Location)
		require.NoError(t, err)
		require.Equal(t, day.AddDate(0, 0, 1).UTC().Format(time.RFC3339), view["resetsAt"], "%s", p)
		require.Equal(t, view["usedToday"], view["used"])
		require.Equal(t, view["dailyCap"], view["cap"])
	}
}

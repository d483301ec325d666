package e2e_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/queries/testfactory"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/radartype"
)

// GET /v1/workers pages newest first with an opaque cursor, in the same
// answer shape as before ({workers:[…]} plus nextCursor); bad paging input
// is a 400 naming the field.
func TestWorkers_ListPaging(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	// Five workers started a minute apart; two share a start time, so the
	// id breaks the tie.
	for i, id := range []string{"1@a#x", "2@a#x", "3@a#x", "4@a#x", "5@a#x"} {
		minutes := i
		if i == 4 {
			minutes = 3
		}
		testfactory.Worker(t.Context(), t, s.Pool, &testfactory.WorkerOpts{ID: id, PID: int32(i + 1), StartedAge: time.Duration(10-minutes) * time.Minute})
	}
	ids := func(page map[string]any) []string {
		var out []string
		for _, w := range page["workers"].([]any) {
			out = append(out, w.(map[string]any)["id"].(string))
		}
		return out
	}
	var seen []string
	path := "/v1/workers?limit=2"
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5, "paging does not end")
		status, page := s.Get(path)
		require.Equal(t, http.StatusOK, status, "%v", page)
		seen = append(seen, ids(page)...)
		cursor, ok := page["nextCursor"].(string)
		if !ok {
			require.Nil(t, page["nextCursor"])
			break
		}
		path = "/v1/workers?limit=2&cursor=" + url.QueryEscape(cursor)
	}
	require.Equal(t, []string{"5@a#x", "4@a#x", "3@a#x", "2@a#x", "1@a#x"}, seen)

	status, all := s.Get("/v1/workers")
	require.Equal(t, http.StatusOK, status)
	require.Len(t, all["workers"], 5)
	require.Nil(t, all["nextCursor"], "one page when the default limit covers them")

	for _, bad := range []struct{ query, field string }{
		{"limit=0", "limit"}, {"limit=501", "limit"}, {"limit=x", "limit"},
		{"cursor=nope", "cursor"}, {"cursor=" + url.QueryEscape("bm90IGEgY3Vyc29y"), "cursor"},
	} {
		status, out := s.Get("/v1/workers?" + bad.query)
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", bad.query, out)
		require.Contains(t, out["detail"], bad.field)
	}
}

// The reap loop deletes the registry rows of workers silent for longer
// than the retention window; recent rows (stopped or not) stay.
func TestWorkers_Retention(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	insert := func(id string, silentFor time.Duration, status radartype.WorkerStatus) {
		testfactory.Worker(t.Context(), t, s.Pool, &testfactory.WorkerOpts{ID: id, PID: 1, Status: status, StartedAge: silentFor, HeartbeatAge: silentFor})
	}
	insert("old@a#x", time.Hour, radartype.WorkerStopped)
	insert("old-crashed@a#x", time.Hour, radartype.WorkerRunning)
	insert("recent@a#x", 0, radartype.WorkerStopped)
	w, _ := s.StartWorkerWith(s.Pool, func(wc *worker.Config, _ *batch.Config) { wc.Retention = time.Minute })

	deadline := time.Now().Add(30 * time.Second)
	for s.Count("SELECT count(*) FROM worker WHERE id LIKE 'old%'") > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the rows of workers silent for an hour were not deleted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, 1, s.Count("SELECT count(*) FROM worker WHERE id = 'recent@a#x'"))
	require.Equal(t, 1, s.Count("SELECT count(*) FROM worker WHERE id = $1", w.ID()))
}

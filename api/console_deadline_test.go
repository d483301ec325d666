package api_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/apptest"
)

// deadlineZone is BUILDRISK_TIMEZONE in the deadline tests.
const deadlineZone = "Asia/Seoul"

// deadlineSystem is a system with two jobs held to a deadline and one
// without: creditEval (deadline 06:00) never ran, so the last deadline
// passed without a completed run and it is late whatever the hour;
// aptTrade runs, its deadline three hours after its request was created,
// forecast to end 3 minutes after it: at risk. corpCodeSync has no
// deadline. It returns the system, aptTrade's deadline and its forecast.
func deadlineSystem(t *testing.T) (s *apptest.System, deadline, forecast time.Time) {
	t.Helper()
	s = apptest.New(t, &apptest.Opts{Env: map[string]string{
		"BUILDRISK_TIMEZONE":            deadlineZone,
		"BUILDRISK_DEADLINE_CREDITEVAL": "06:00",
		"BUILDRISK_DEADLINE_APTTRADE":   apptest.DeadlineFromNow(t, deadlineZone, 3*time.Hour),
	}})
	// The running request is created now: the deadline it is held to is
	// the first occurrence after that, about three hours ahead.
	_, executionID := s.InsertRunning("1@deadline#a", time.Now())
	status, job := s.Get("/v1/jobs/aptTrade")
	require.Equal(t, http.StatusOK, status, "%v", job)
	deadline, err := time.Parse(time.RFC3339Nano, job["deadline"].(string))
	require.NoError(t, err)
	require.WithinRange(t, deadline, time.Now().Add(2*time.Hour+58*time.Minute), time.Now().Add(3*time.Hour))
	forecast = deadline.Add(3 * time.Minute)
	s.SetForecast(executionID, forecast)
	return s, deadline, forecast
}

// A job held to a deadline (BUILDRISK_DEADLINE_<JOB>) gets the console's
// Deadline column, and the job list the page polls with its session says
// which job is late and which at risk, with the deadline and the forecast;
// a job without a deadline has none. Viewers see it as operators do.
func TestConsole_Deadlines(t *testing.T) {
	t.Parallel()
	s, deadline, forecast := deadlineSystem(t)
	at := func(v any) time.Time {
		t.Helper()
		parsed, err := time.Parse(time.RFC3339Nano, v.(string))
		require.NoError(t, err)
		return parsed
	}
	for _, token := range []string{apptest.OperatorToken, apptest.ViewerToken} {
		c := apptest.NewConsoleClient(t, s.API)
		require.Equal(t, http.StatusSeeOther, c.Login(token).StatusCode)
		page := c.Page()
		require.Contains(t, page, `<th>Running</th><th class="deadline"`, "the Deadline column, after Running")
		require.Contains(t, page, `>Deadline</th><th>Active request</th>`)
		require.Contains(t, page, "the time of day in "+deadlineZone+" by which the job's run must be done", "the header says what a deadline is")

		// The page's data: the job list, read with the session cookie.
		resp, body := c.Send(http.MethodGet, "/v1/jobs", "", "", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		var out struct{ Jobs []map[string]any }
		require.NoError(t, json.Unmarshal([]byte(body), &out))
		jobs := map[string]map[string]any{}
		for _, j := range out.Jobs {
			jobs[j["name"].(string)] = j
		}

		apt := jobs["aptTrade"]
		require.Equal(t, "at-risk", apt["deadlineStatus"], "running, forecast after its deadline")
		require.Equal(t, true, apt["running"])
		require.True(t, deadline.Equal(at(apt["deadline"])), "%v", apt["deadline"])
		require.True(t, forecast.Equal(at(apt["forecastDoneAt"])), "%v", apt["forecastDoneAt"])

		credit := jobs["creditEval"]
		require.Equal(t, "late", credit["deadlineStatus"], "idle and never completed")
		require.True(t, at(credit["deadline"]).After(time.Now()), "the next deadline")
		require.Nil(t, credit["forecastDoneAt"], "nothing runs")

		for _, field := range []string{"deadline", "forecastDoneAt", "deadlineStatus"} {
			require.Nil(t, jobs["corpCodeSync"][field], "no deadline: %s is null", field)
		}
	}
}

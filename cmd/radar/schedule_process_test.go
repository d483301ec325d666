package main

import (
	"context"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs/riskmetric"
	"github.com/buildrisk/radar/observability"
)

// A leader killed (SIGKILL: no resignation, a transaction possibly cut
// short) between due times: the next leader, once River's lease expires,
// enqueues every due time the dead one did not get to exactly once, none
// missed (the catch-up window covers the lease), none twice. Real time and
// a real process: the assertions count rows per due time, never timing.
func TestSchedule_KilledLeaderNextEnqueuesOnce(t *testing.T) {
	t.Parallel()
	const every = 2 * time.Second
	bin := buildRadar(t)
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{
		"BUILDRISK_SCHEDULE_METRICS":         "@every " + every.String(),
		"BUILDRISK_SCHEDULE_CATCHUP_METRICS": "2m",
	}})
	dead := startRadar(t, bin, s.ProcessEnv(nil), "worker")
	s.Eventually("the first leader to record two due times", func() bool {
		return s.Count("SELECT count(*) FROM schedule_tick WHERE job = 'metrics'") >= 2
	})
	require.NoError(t, dead.cmd.Process.Kill())
	dead.Wait(t, 30*time.Second)
	var lastByDead time.Time
	require.NoError(t, s.Pool.QueryRow(context.Background(), "SELECT max(due_at) FROM schedule_tick WHERE job = 'metrics'").Scan(&lastByDead))
	firstAfter := lastByDead.Add(every)

	// The next leader starts only after two due times have passed: it
	// catches up from the newest recorded due time, not from its own start.
	s.Eventually("two due times to pass", func() bool { return time.Now().After(firstAfter.Add(every)) })
	next := s.StartScheduler()
	s.WaitLeader(next)
	s.Eventually("the next leader to catch up", func() bool { return s.TickOutcome(riskmetric.Name, firstAfter.Add(2*every)) != "" })

	outcome := s.TickOutcome(riskmetric.Name, firstAfter)
	require.Contains(t, []string{observability.TickEnqueued, observability.TickDeferred, observability.TickCoalesced}, outcome)
	require.LessOrEqual(t, s.Count("SELECT count(*) FROM job_request WHERE job = 'metrics' AND due_at = $1", firstAfter), 1)
	require.Zero(t, s.Count("SELECT count(*) FROM schedule_tick WHERE outcome IN ('missed', 'failed')"))
	require.Zero(t, s.Count(`SELECT count(*) FROM (
		SELECT due_at FROM job_request WHERE source = 'schedule' GROUP BY due_at HAVING count(*) > 1) d`), "one request per due time")
	// No gap: every due time from the first to the newest is recorded once.
	// One statement: the leader keeps recording due times meanwhile.
	var first, last time.Time
	var recorded int
	require.NoError(t, s.Pool.QueryRow(context.Background(), "SELECT min(due_at), max(due_at), count(*) FROM schedule_tick WHERE job = 'metrics'").Scan(&first, &last, &recorded))
	require.Equal(t, int(last.Sub(first)/every)+1, recorded)
}

package radartype_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/radartype"
)

func TestExecutionStatus(t *testing.T) {
	t.Parallel()
	for _, s := range []radartype.ExecutionStatus{radartype.ExecutionStarting, radartype.ExecutionStarted, radartype.ExecutionStopping} {
		require.True(t, s.Active(), s)
		require.False(t, s.Final(), s)
	}
	for _, s := range radartype.FinalExecutionStatuses() {
		require.False(t, s.Active(), s)
		require.True(t, s.Final(), s)
	}
	require.Equal(t, []radartype.ExecutionStatus{"ABANDONED", "COMPLETED", "FAILED", "STOPPED"}, radartype.FinalExecutionStatuses())
	require.Equal(t, radartype.RequestDone, radartype.ExecutionCompleted.RequestStatus())
	require.Equal(t, radartype.RequestDone, radartype.ExecutionStopped.RequestStatus())
	require.Equal(t, radartype.RequestFailed, radartype.ExecutionFailed.RequestStatus())
	require.Equal(t, radartype.RequestFailed, radartype.ExecutionAbandoned.RequestStatus())
	require.Equal(t, "STOPPING", radartype.ExecutionStopping.String())
}

func TestRequestVocabulary(t *testing.T) {
	t.Parallel()
	require.Equal(t, []radartype.RequestStatus{"QUEUED", "RUNNING", "DONE", "FAILED"}, radartype.RequestStatuses())
	require.True(t, radartype.RequestQueued.Valid())
	require.False(t, radartype.RequestStatus("STOPPED").Valid())
	require.Equal(t, []radartype.RequestSource{"api", "chain", "cli", "resume", "schedule"}, radartype.RequestSources())
	require.True(t, radartype.SourceResume.Valid())
	require.False(t, radartype.RequestSource("cron").Valid())
}

func TestStopCause(t *testing.T) {
	t.Parallel()
	require.Equal(t, []radartype.StopCause{"drain", "reap", "database", "provider-rate", "cap"}, radartype.ResumableCauses())
	require.Equal(t, []radartype.StopCause{"drain", "reap", "database", "provider-rate", "cap", "operator", "max_calls", "failure"}, radartype.StopCauses(),
		"the resumable causes first; ExecutionView.stopCause's enum lists them all")
	for _, c := range []radartype.StopCause{radartype.CauseOperator, radartype.CauseMaxCalls, radartype.CauseFailure} {
		require.False(t, c.Resumable(), c)
	}
	require.True(t, radartype.CauseReap.Resumable())
	require.True(t, radartype.CauseProviderRate.Resumable(), "the provider said when")
	require.True(t, radartype.CauseCap.Resumable(), "at the provider's next reset, when named (opt-in)")
	// The returned lists are copies: changing one changes nothing here.
	causes := radartype.ResumableCauses()
	causes[0] = radartype.CauseCap
	require.Equal(t, radartype.CauseDrain, radartype.ResumableCauses()[0])
}

package request

import (
	"testing"

	"github.com/buildrisk/radar/radartype"
)

// The restart rule (docs/architecture.md): the job's newest execution is
// resumed when it ended STOPPED, FAILED or ABANDONED with the same params
// and without confirmPurge; a COMPLETED or still active one never is.
func TestResumes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status radartype.ExecutionStatus
		hash   string
		purged bool
		want   bool
	}{
		{radartype.ExecutionStopped, "h", false, true},
		{radartype.ExecutionFailed, "h", false, true},
		{radartype.ExecutionAbandoned, "h", false, true},
		{radartype.ExecutionStopped, "other", false, false},
		{radartype.ExecutionFailed, "h", true, false},
		{radartype.ExecutionCompleted, "h", false, false},
		{radartype.ExecutionStarting, "h", false, false},
		{radartype.ExecutionStarted, "h", false, false},
		{radartype.ExecutionStopping, "h", false, false},
		{"", "h", false, false},
	} {
		if got := resumes(string(tc.status), tc.hash, tc.purged, "h"); got != tc.want {
			t.Errorf("resumes(%q, %q, purge %v) = %v, want %v", tc.status, tc.hash, tc.purged, got, tc.want)
		}
	}
}

package request

import "testing"

// The restart rule (docs/architecture.md): the job's newest execution is
// resumed when it ended STOPPED, FAILED or ABANDONED with the same params
// and without confirmPurge; a COMPLETED or still active one never is.
func TestResumes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status string
		hash   string
		purged bool
		want   bool
	}{
		{ExecutionStopped, "h", false, true},
		{ExecutionFailed, "h", false, true},
		{ExecutionAbandoned, "h", false, true},
		{ExecutionStopped, "other", false, false},
		{ExecutionFailed, "h", true, false},
		{ExecutionCompleted, "h", false, false},
		{ExecutionStarting, "h", false, false},
		{ExecutionStarted, "h", false, false},
		{ExecutionStopping, "h", false, false},
		{"", "h", false, false},
	} {
		if got := resumes(tc.status, tc.hash, tc.purged, "h"); got != tc.want {
			t.Errorf("resumes(%q, %q, purge %v) = %v, want %v", tc.status, tc.hash, tc.purged, got, tc.want)
		}
	}
}

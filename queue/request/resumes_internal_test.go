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

// A resume's estimate is the whole run's share of the chunks left, rounded
// up; an instance that never planned, or a run estimated at no call, keeps
// the whole estimate.
func TestCallsLeft(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		full               int
		planned, committed int64
		want               int
	}{
		{12, 12, 5, 7},  // a call per chunk: the chunks left
		{12, 12, 0, 12}, // nothing committed: all of it
		{12, 12, 12, 0}, // everything committed: nothing left
		{414, 24, 12, 207},
		{1010, 4, 1, 758}, // 757.5 rounded up
		{1, 10, 9, 1},     // a download's call: never rounded away
		{12, 0, 0, 12},    // no execution planned yet
		{0, 12, 5, 0},
		{12, 12, 14, 0}, // more commits than planned (a plan that shrank)
	} {
		if got := callsLeft(tc.full, tc.planned, tc.committed); got != tc.want {
			t.Errorf("callsLeft(%d, %d planned, %d committed) = %d, want %d", tc.full, tc.planned, tc.committed, got, tc.want)
		}
	}
}

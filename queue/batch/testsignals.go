package batch

// testSignals are the runner's test-only hooks, after River's testSignals:
// their zero value, the one production always has, does nothing, and only
// this package's tests set them (export_test.go), before the runner's first
// run. Nothing outside the package can reach them: a test of the whole
// system drives its fault from outside (a lock, a cut connection, a halted
// server) and observes what production already exposes (a row, a metric,
// a log line).
type testSignals struct {
	// transient is called with each transient database error a run
	// retries (retryTransient).
	transient func(err error)
	// answerLost is called after each part or chunk commit that landed,
	// with which it was (commitPart, commitChunk). An error it returns
	// stands for the commit's answer, lost on its way back (a connection
	// reset after the server committed): the run retries the commit as it
	// would then.
	answerLost func(commit string) error
}

// The commits testSignals.answerLost is told of.
const (
	commitPart  = "part"
	commitChunk = "chunk"
)

// transientRetried signals a transient database error about to be retried.
func (s *testSignals) transientRetried(err error) {
	if s.transient != nil {
		s.transient(err)
	}
}

// committed signals a commit that landed, and returns the error that stands
// for its answer (nil: the answer arrived).
func (s *testSignals) committed(commit string) error {
	if s.answerLost == nil {
		return nil
	}
	return s.answerLost(commit)
}

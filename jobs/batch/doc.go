// Package batch is the chunk runner every job runs under. A job is split
// into chunks; each chunk is read and processed with no transaction open
// (external calls happen here), then its writes and its checkpoint commit in
// one short transaction. The runner owns the execution records and their
// state machine (STARTING → STARTED → (STOPPING →) STOPPED | COMPLETED |
// FAILED), the restart rules, stop and drain at chunk boundaries, call caps,
// the accounting that refuses a silent success (every chunk's targets =
// written + skipped + failed before it commits, and the instance's declared
// targets at the end), and bounded fan-out. A fan-out chunk commits each
// item paid for as it comes back, in checkpoint parts (FanOutCommit), so a
// stop, drain, cap or kill inside a chunk loses at most the calls in flight.
//
// A job implements Job and knows nothing of HTTP or River: the worker and
// the CLI both call Runner.Run.
package batch

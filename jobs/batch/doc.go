// Package batch is the chunk runner every job runs under. A job is split
// into chunks; each chunk is read and processed with no transaction open
// (external calls happen here), then its writes and its checkpoint commit in
// one short transaction. The runner owns the execution records and their
// state machine (STARTING → STARTED → (STOPPING →) STOPPED | COMPLETED |
// FAILED), the restart rules, stop and drain at chunk boundaries, call caps,
// the accounting that refuses a silent success, and bounded fan-out.
//
// A job implements Job and knows nothing of HTTP or River: the worker and
// the CLI both call Runner.Run.
package batch

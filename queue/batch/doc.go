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
// A stop is bounded like a drain: once the run has seen it, no item is
// handed out and the calls in flight get Config.StopTimeout (stop.go).
//
// A job implements Job and knows nothing of HTTP or River: the worker and
// the CLI both call Runner.Run.
//
// # Ownership
//
// An execution is owned by one worker under one lease epoch: it takes its
// instance's next epoch when it starts, so a resume fences off every earlier
// execution of the instance. Every write a run makes — the plan, each
// chunk's commit with its checkpoint, the external-call counts, the outcome
// and the request it chains to — is conditional in SQL on the execution
// still being active under that worker and epoch, and its row count is
// checked (a chunk's and a part's commit, sent as one implicit transaction,
// cannot check between statements, so their fenced statement raises
// instead: pgtx.IsNotOwned). The condition is one SQL function,
// execution_owned, which every fenced statement calls. A job cannot write
// around it: the Run it receives reads through a Reader, whose statements
// each run in a read-only transaction, and its only ways to write are its
// chunks' commits (ChunkResult) and Run.Fenced, a transaction whose first
// statement is the fence. A run that finds no row has lost its
// execution (the reaper took its worker for dead, or a newer execution took
// over): it stops at once, rolls back what it was writing, writes nothing
// more, logs one line, counts buildrisk_ownership_lost_total and returns
// ErrOwnershipLost.
//
// The loss is found by a fenced write, by the lease check that runs every
// Config.LeaseCheckInterval while a chunk is in flight, or by the process's
// Fence. At that moment the only calls that can still be in flight are the
// current chunk's: at most the fan-out's size (Config.FanOut), one for a
// job that calls one at a time, none when a commit found the loss (Process
// had returned). The chunk's context is cancelled, Process returns only
// once they have ended, and nothing they returned is written: the chunk's
// commit is itself a fenced write, so it raises and rolls back.
//
// # Database outages
//
// Each database call of a run is bounded by Config.DBTimeout. A transient
// error (pgtx.IsTransient: a refused or reset connection, a restart, a
// statement timeout, a serialization failure or deadlock) is retried with a
// capped backoff for as long as the process keeps its window, that is until
// its Fence fires; only then does the run fail, with a message naming the
// outage. The Fence fires safely before any reaper can see the process
// stale, so a run that rides an outage out is never taken over meanwhile.
//
// An error from a provider (upstream.CallError, a pgtx.ProviderError) is
// never such an outage, even when it wraps a reset connection, an
// unexpected EOF or a timeout while its body was read: the provider client
// retried it already, so the item or chunk fails at once, naming the
// provider.
package batch

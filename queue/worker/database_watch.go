package worker

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/sql/pgfence"
)

// DatabaseIdentity identifies the database cluster a process reaches and
// where in its history it stands. A failover keeps SystemIdentifier (a
// physical replica is a copy of its primary) and moves to the next
// Timeline (a promotion starts one); a URL that now reaches another
// cluster changes SystemIdentifier.
type DatabaseIdentity struct {
	// SystemIdentifier is the cluster's identifier (pg_control_system()),
	// picked by initdb and kept by its replicas and backups.
	SystemIdentifier int64
	// Timeline is the timeline the server writes WAL on; on a standby, its
	// last restartpoint's.
	Timeline int64
	// InRecovery is true on a standby (pg_is_in_recovery()). It is not part
	// of the identity: Equal ignores it.
	InRecovery bool
}

// Equal reports whether id and other name the same cluster on the same
// timeline.
func (id DatabaseIdentity) Equal(other DatabaseIdentity) bool {
	return id.SystemIdentifier == other.SystemIdentifier && id.Timeline == other.Timeline
}

// String returns the identity as logs print it: "system 7441…, timeline 2".
func (id DatabaseIdentity) String() string {
	s := fmt.Sprintf("system %d, timeline %d", id.SystemIdentifier, id.Timeline)
	if id.InRecovery {
		s += " (in recovery)"
	}
	return s
}

// DatabaseMove is one change of the database's identity a process saw:
// from the identity it had seen last to the one it sees now.
type DatabaseMove struct {
	From, To DatabaseIdentity
}

// Failover reports whether the move is a failover of the same cluster (a
// replica promoted: same system identifier, another timeline) rather than
// a move to another cluster.
func (m DatabaseMove) Failover() bool {
	return m.From.SystemIdentifier == m.To.SystemIdentifier
}

// DatabaseWatch notices that the database moved under a process: with a
// multi-host DATABASE_URL (target_session_attrs=read-write), pgx moves
// every connection to a promoted replica within a second of a failover,
// and nothing else in the process would tell. The process's database
// probe (a worker's heartbeat, the api's probe) calls Check after each
// probe that succeeded; Check reads the database's identity
// (DatabaseIdentity) and compares it with the last one seen. On a change
// it counts buildrisk_database_failovers_total, logs one WARN line naming
// both identities, and calls every subscriber (Subscribe). Each Check also
// records buildrisk_database_sync_replication.
//
// With asynchronous replication, the commits a primary acknowledged in its
// last moments may be missing on the promoted replica; a subscriber (the
// runner) re-verifies what it believes committed. With synchronous
// replication nothing acknowledged is lost.
//
// Check also feeds the process's timeline fence (pgfence.Process) and,
// when db is a pool on a multi-host URL, probes every host of it: a host
// of the same system on a lower timeline that still answers read-write is
// a demoted primary beside the promoted one (a split brain). The fence
// then refuses it (no connection of the process is used there any more),
// the watch logs "database split brain: …" once per episode, and
// buildrisk_database_split_brain is 1 until only one host answers
// read-write.
//
// One DatabaseWatch per process: every probe of the process shares it, so
// a move is counted once however many probes see it. A process that
// reaches two primaries in turn (a split brain behind one URL) counts
// every switch. Its methods are safe
// for concurrent use, and a nil *DatabaseWatch does nothing.
type DatabaseWatch struct {
	instruments *observability.Instruments
	logger      *slog.Logger
	queries     *queries.Queries

	mu          sync.Mutex
	seen        bool
	current     DatabaseIdentity
	readFailed  bool // the last read failed (logged once until one succeeds)
	splitBrain  bool // the last probe of every host found two primaries
	subscribers map[int]func(DatabaseMove)
	nextID      int
}

// NewDatabaseWatch returns the watch of a process that has not seen the
// database yet; the first Check records the identity without counting a
// move. instruments may be nil (nothing recorded), logger nil (the
// default logger).
func NewDatabaseWatch(instruments *observability.Instruments, logger *slog.Logger) *DatabaseWatch {
	if logger == nil {
		logger = slog.Default()
	}
	return &DatabaseWatch{instruments: instruments, logger: logger, queries: queries.New(), subscribers: map[int]func(DatabaseMove){}}
}

// Subscribe calls f with every move of the database the watch sees from
// now on, once per move, after the move was counted and logged. f runs on
// the goroutine of the probe that saw the move, one subscriber after the
// other: it must return quickly (start a goroutine for slow work such as
// re-verifying committed chunks) and must not call Subscribe or the
// returned cancel. Cancel stops the calls; it is idempotent.
func (w *DatabaseWatch) Subscribe(f func(DatabaseMove)) (cancel func()) {
	if w == nil {
		return func() {}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	id := w.nextID
	w.nextID++
	w.subscribers[id] = f
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.subscribers, id)
	}
}

// Check reads the identity of the database db reaches and compares it with
// the last one seen (see DatabaseWatch), and records whether that database
// replicates synchronously. A read that fails is logged (once until a read
// succeeds again) and returned; it changes nothing else: the probe itself
// tells whether the database is up.
func (w *DatabaseWatch) Check(ctx context.Context, db queries.DBTX) error {
	if w == nil {
		return nil
	}
	row, err := w.queries.DatabaseIdentity(ctx, db)
	if err != nil {
		err = fmt.Errorf("error reading the database's identity: %w", err)
		w.mu.Lock()
		first := !w.readFailed
		w.readFailed = true
		w.mu.Unlock()
		if first && ctx.Err() == nil {
			w.logger.WarnContext(ctx, "could not read the database's identity; failovers go unnoticed until it can be read", slog.String("error", err.Error()))
		}
		return err
	}
	id := DatabaseIdentity{SystemIdentifier: row.SystemIdentifier, Timeline: row.Timeline, InRecovery: row.InRecovery}
	if w.instruments != nil {
		w.instruments.DatabaseSyncReplicationSet(ctx, SynchronousReplication(row.SynchronousStandbyNames, row.SynchronousCommit))
	}
	_ = pgfence.Process().Observe(pgfence.Identity{SystemIdentifier: id.SystemIdentifier, Timeline: id.Timeline, InRecovery: id.InRecovery})
	w.checkHosts(ctx, db)

	w.mu.Lock()
	w.readFailed = false
	first, previous := !w.seen, w.current
	w.seen, w.current = true, id
	var notify []func(DatabaseMove)
	moved := !first && !previous.Equal(id)
	if moved {
		for _, f := range w.subscribers {
			notify = append(notify, f)
		}
	}
	w.mu.Unlock()

	switch {
	case first:
		w.logger.InfoContext(ctx, "database identity", slog.Int64("system_identifier", id.SystemIdentifier), slog.Int64("timeline", id.Timeline),
			slog.Bool("in_recovery", id.InRecovery), slog.String("synchronous_standby_names", row.SynchronousStandbyNames),
			slog.String("synchronous_commit", row.SynchronousCommit))
	case moved:
		move := DatabaseMove{From: previous, To: id}
		if w.instruments != nil {
			w.instruments.DatabaseFailover(ctx)
		}
		what := "database failover: a replica was promoted"
		if !move.Failover() {
			what = "database moved: the URL now reaches another cluster"
		}
		w.logger.WarnContext(ctx, what+"; commits acknowledged just before it may be missing unless replication was synchronous",
			slog.String("from", previous.String()), slog.String("to", id.String()),
			slog.Int64("from_system_identifier", previous.SystemIdentifier), slog.Int64("from_timeline", previous.Timeline),
			slog.Int64("to_system_identifier", id.SystemIdentifier), slog.Int64("to_timeline", id.Timeline))
		for _, f := range notify {
			f(move)
		}
	}
	return nil
}

// configured is a pool: it tells the URL it was made from.
type configured interface {
	Config() *pgxpool.Config
}

// checkHosts probes every host of db's multi-host URL (nothing for a
// single host, or a db that is not a pool), which teaches the process's
// timeline fence the highest timeline of each system, and reports a split
// brain: two hosts of one system answering read-write.
func (w *DatabaseWatch) checkHosts(ctx context.Context, db queries.DBTX) {
	pool, ok := db.(configured)
	if !ok {
		return
	}
	cfg := pool.Config().ConnConfig
	if len(cfg.Fallbacks) == 0 {
		return
	}
	ids, _ := pgfence.Process().Probe(ctx, &cfg.Config)
	split := pgfence.SplitBrain(ids)
	w.mu.Lock()
	was := w.splitBrain
	w.splitBrain = len(split) > 0
	w.mu.Unlock()
	if w.instruments != nil {
		w.instruments.DatabaseSplitBrainSet(ctx, len(split) > 0)
	}
	switch {
	case len(split) > 0 && !was:
		for system, primaries := range split {
			hosts := make([]string, len(primaries))
			for i, p := range primaries {
				hosts[i] = p.String()
			}
			w.logger.ErrorContext(ctx, "database split brain: hosts of one system answer read-write; writing only to the highest timeline",
				slog.Int64("system_identifier", system), slog.Int64("timeline", pgfence.Process().Highest(system)),
				slog.String("hosts", strings.Join(hosts, "; ")))
		}
	case len(split) == 0 && was:
		w.logger.InfoContext(ctx, "database split brain over: one host of each system answers read-write")
	}
}

// SynchronousReplication reports whether a session with these settings
// has each commit acknowledged only once a synchronous standby has it, so
// that a failover to that standby loses no acknowledged commit: a standby
// is named (synchronous_standby_names not empty) and synchronous_commit is
// on (the standby flushed the commit to disk) or remote_apply (it also
// applied it). remote_write (the standby's kernel has it, not its disk),
// local and off do not count: a commit is then acknowledged before the
// standby could survive with it.
func SynchronousReplication(standbyNames, synchronousCommit string) bool {
	if strings.TrimSpace(standbyNames) == "" {
		return false
	}
	switch synchronousCommit {
	case "on", "remote_apply":
		return true
	default:
		return false
	}
}

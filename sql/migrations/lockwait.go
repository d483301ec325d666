package migrations

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// lockNotAvailable is the SQLSTATE of a statement that waited longer than
// lock_timeout for a lock. The package is a leaf (docs/architecture.md), so
// it tells the error itself rather than through sql/pgtx.
const lockNotAvailable = "55P03"

// isLockTimeout reports whether err is a statement's lock timeout.
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == lockNotAvailable
}

// sessionPIDs are the backend pids of the connections that apply
// migrations, whose lock waits Migrate looks for.
type sessionPIDs struct {
	mu   sync.Mutex
	pids []int32
}

func (s *sessionPIDs) add(pid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pids = append(s.pids, int32(pid))
}

func (s *sessionPIDs) list() []int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int32(nil), s.pids...)
}

// lockTimeoutPool opens the pool that applies migrations: pool's
// configuration, with lock_timeout sent in every connection's startup
// message (it overrides one of the role or the database), and every
// connection's backend pid recorded in sessions.
func lockTimeoutPool(ctx context.Context, pool *pgxpool.Pool, lockTimeout time.Duration, sessions *sessionPIDs) (*pgxpool.Pool, error) {
	cfg := pool.Config()
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = strconv.FormatInt(max(lockTimeout.Milliseconds(), 1), 10)
	// Connections only for as long as migrations run.
	cfg.MinConns, cfg.MinIdleConns = 0, 0
	next := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		sessions.add(conn.PgConn().PID())
		if next != nil {
			return next(ctx, conn)
		}
		return nil
	}
	migrationPool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("error creating migration pool: %w", err)
	}
	return migrationPool, nil
}

// retryLockTimeouts runs apply until it succeeds, fails with an error other
// than a lock timeout, or config.LockRetryFor has passed. Each lock timeout
// is logged with what apply waited on, as seen from pool while it waited.
func retryLockTimeouts(ctx context.Context, pool *pgxpool.Pool, sessions *sessionPIDs, config *Config, apply func(context.Context) error) error {
	var (
		begin    = time.Now()
		attempts int
		// seen is what the latest attempt was seen waiting on (nil: it
		// was not), lastSeen the latest wait seen in any attempt.
		seen, lastSeen *lockWait
	)
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		attempts++
		var err error
		seen, err = watchLockWaits(ctx, pool, sessions, config.LockTimeout, apply)
		if seen != nil {
			lastSeen = seen
		}
		if err != nil && !isLockTimeout(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	},
		backoff.WithBackOff(&backoff.ExponentialBackOff{
			InitialInterval: config.LockTimeout / 2,
			Multiplier:      2,
			MaxInterval:     4 * config.LockTimeout,
			// A migrator or two at most: no herd to spread, and the
			// waits stay what the documentation says.
			RandomizationFactor: 0,
		}),
		backoff.WithMaxElapsedTime(config.LockRetryFor),
		backoff.WithNotify(func(err error, next time.Duration) {
			config.Logger.WarnContext(ctx, "migration waited longer than lock_timeout for a lock, rolled back; retrying",
				slog.Int("attempt", attempts),
				slog.Duration("lock_timeout", config.LockTimeout),
				slog.String("waited_on", seen.String()),
				slog.Duration("retry_in", next),
				slog.Duration("gives_up_in", max(config.LockRetryFor-time.Since(begin), 0).Round(time.Millisecond)),
				slog.String("error", err.Error()),
			)
		}),
	)
	if err != nil && isLockTimeout(err) {
		waited := "the waits ended between two looks at pg_locks"
		if lastSeen != nil {
			waited = "last seen: " + lastSeen.String()
		}
		return fmt.Errorf("gave up after %d attempts in %s, each waiting longer than lock_timeout %s for a lock (%s); "+
			"let the session holding it finish, or end it, then migrate again (docs/operations.md, \"Upgrade\"): %w",
			attempts, time.Since(begin).Round(time.Millisecond), config.LockTimeout, waited, err)
	}
	return err
}

// watchLockWaits runs apply while it looks, every quarter of lockTimeout
// (at most every second), from a connection of pool, for a lock that one of
// sessions waits for. It returns apply's error and the last wait it saw,
// nil if it saw none.
func watchLockWaits(ctx context.Context, pool *pgxpool.Pool, sessions *sessionPIDs, lockTimeout time.Duration, apply func(context.Context) error) (*lockWait, error) {
	watchCtx, stop := context.WithCancel(ctx)
	var (
		wg   sync.WaitGroup
		seen *lockWait
	)
	wg.Go(func() {
		ticker := time.NewTicker(min(max(lockTimeout/4, 10*time.Millisecond), time.Second))
		defer ticker.Stop()
		for {
			select {
			case <-watchCtx.Done():
				return
			case <-ticker.C:
			}
			// A failed look costs the report, never the migration.
			if wait, err := lookForLockWait(watchCtx, pool, sessions.list()); err == nil && wait != nil {
				seen = wait
			}
		}
	})
	err := apply(ctx)
	stop()
	wg.Wait()
	return seen, err
}

// lockWait is a lock one of the migration's sessions waits for, and the
// sessions it waits behind.
type lockWait struct {
	// Mode is the lock mode requested, such as AccessExclusiveLock.
	Mode string
	// LockType is pg_locks.locktype: relation, transactionid, ...
	LockType string
	// Relation names the relation of a relation lock, empty otherwise.
	Relation string
	// Blockers are the sessions holding a conflicting lock or queued ahead
	// for one (pg_blocking_pids).
	Blockers []lockBlocker
}

// lockBlocker is a session a lock request waits behind.
type lockBlocker struct {
	PID int32
	// Modes are the modes it holds on the same object, "(waiting)" after
	// one it is queued for.
	Modes           string
	ApplicationName string
	State           string
	// XactAge is how long its transaction has been open.
	XactAge time.Duration
	Query   string
}

// String describes the wait for a log line or an error, such as
// `AccessExclusiveLock on relation job_execution behind pid 4242 (holds
// AccessShareLock; active, transaction open 31.2s, application_name
// "pg_dump", query "COPY public.job_execution (...) TO stdout;")`.
func (w *lockWait) String() string {
	if w == nil {
		return "not seen: the wait ended between two looks at pg_locks"
	}
	var b strings.Builder
	b.WriteString(w.Mode)
	if w.Relation != "" {
		fmt.Fprintf(&b, " on relation %s", w.Relation)
	} else {
		fmt.Fprintf(&b, " on a %s lock", w.LockType)
	}
	for i, blocker := range w.Blockers {
		if i == 0 {
			b.WriteString(" behind ")
		} else {
			b.WriteString(", ")
		}
		held := "holds " + blocker.Modes
		if blocker.Modes == "" {
			held = "queued ahead"
		}
		fmt.Fprintf(&b, "pid %d (%s; %s, transaction open %s", blocker.PID, held, blocker.State, blocker.XactAge.Round(100*time.Millisecond))
		if blocker.ApplicationName != "" {
			fmt.Fprintf(&b, ", application_name %q", blocker.ApplicationName)
		}
		fmt.Fprintf(&b, ", query %q)", blocker.Query)
	}
	return b.String()
}

// lockWaitQuery lists, for each lock one of the backends $1 waits for, the
// backends it waits behind, with what they hold of the same lock target and
// what they are doing. It reads only the server's catalog views, which
// exist before any migration has run.
const lockWaitQuery = `
SELECT w.mode, w.locktype, coalesce(w.relation::regclass::text, ''),
       b.pid,
       coalesce((
           SELECT string_agg(h.mode || CASE WHEN h.granted THEN '' ELSE ' (waiting)' END, ', ' ORDER BY h.mode)
           FROM pg_catalog.pg_locks h
           WHERE h.pid = b.pid
             AND (h.locktype, h.database, h.relation, h.page, h.tuple, h.virtualxid, h.transactionid, h.classid, h.objid, h.objsubid)
                 IS NOT DISTINCT FROM
                 (w.locktype, w.database, w.relation, w.page, w.tuple, w.virtualxid, w.transactionid, w.classid, w.objid, w.objsubid)
       ), ''),
       coalesce(a.application_name, ''), coalesce(a.state, ''),
       coalesce(extract(epoch FROM clock_timestamp() - a.xact_start), 0)::float8,
       coalesce(left(a.query, 200), '')
FROM pg_catalog.pg_locks w
CROSS JOIN LATERAL unnest(pg_catalog.pg_blocking_pids(w.pid)) AS b(pid)
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = b.pid
WHERE w.pid = ANY($1::int4[]) AND NOT w.granted
ORDER BY w.pid, b.pid`

// lookForLockWait returns the lock one of pids waits for, with the
// sessions it waits behind, or nil when none of them waits.
func lookForLockWait(ctx context.Context, pool *pgxpool.Pool, pids []int32) (*lockWait, error) {
	if len(pids) == 0 {
		return nil, nil
	}
	rows, err := pool.Query(ctx, lockWaitQuery, pids)
	if err != nil {
		return nil, fmt.Errorf("error looking at pg_locks: %w", err)
	}
	defer rows.Close()
	var wait *lockWait
	for rows.Next() {
		var (
			w          lockWait
			blocker    lockBlocker
			xactAgeSec float64
		)
		if err := rows.Scan(&w.Mode, &w.LockType, &w.Relation, &blocker.PID, &blocker.Modes,
			&blocker.ApplicationName, &blocker.State, &xactAgeSec, &blocker.Query); err != nil {
			return nil, fmt.Errorf("error reading pg_locks: %w", err)
		}
		blocker.XactAge = time.Duration(xactAgeSec * float64(time.Second))
		blocker.Query = strings.Join(strings.Fields(blocker.Query), " ")
		if wait == nil {
			wait = &w
		} else if w.Mode != wait.Mode || w.LockType != wait.LockType || w.Relation != wait.Relation {
			continue // a session waits for one lock at a time; one is enough to report
		}
		wait.Blockers = append(wait.Blockers, blocker)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error reading pg_locks: %w", err)
	}
	return wait, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/sql/pglocal"
)

// The replication modes of the soak's database (-replication).
const (
	// replicationNone is one server, as the soak has always run.
	replicationNone = "none"
	// replicationAsync is a primary and an asynchronous standby: a
	// failover may lose the commits the primary acknowledged last.
	replicationAsync = "async"
	// replicationSync is a primary and a synchronous standby: every commit
	// waits until the standby has flushed it, so a failover loses nothing
	// acknowledged.
	replicationSync = "sync"
)

// replicationModes are the values -replication accepts.
var replicationModes = []string{replicationNone, replicationAsync, replicationSync}

// startDatabase starts the soak's PostgreSQL: one server, or with
// -replication a primary and a standby streaming from it (pg_basebackup),
// started before the migration so that everything the run writes
// replicates. Every process then reaches the database through a multi-host
// URL naming both with target_session_attrs=read-write, the form of a
// production DATABASE_URL in front of a primary and its replica: a client
// keeps the first host that accepts writes, so after a failover every new
// connection lands on the promoted standby.
func (s *system) startDatabase(ctx context.Context) error {
	if s.cfg.replication == replicationNone {
		pg, err := startPG(ctx, s.logger)
		if err != nil {
			return err
		}
		s.pg = pg
		s.pgAddrs = []string{nodeAddr(pg)}
		s.dbURL = databaseURL(s.pgAddrs, false)
		return nil
	}
	primary, err := startNode(ctx, pglocal.Config{Logger: s.logger, Replication: true})
	if err != nil {
		return fmt.Errorf("error starting the primary: %w", err)
	}
	s.pg = primary
	standby, err := startNode(ctx, pglocal.Config{Logger: s.logger, StandbyOf: primary.cluster, Synchronous: s.cfg.replication == replicationSync})
	if err != nil {
		return fmt.Errorf("error starting the standby: %w", err)
	}
	s.standby = standby
	s.pgAddrs = []string{nodeAddr(primary), nodeAddr(standby)}
	s.dbURL = databaseURL(s.pgAddrs, true)
	return nil
}

// nodeAddr is a server's host:port.
func nodeAddr(pg *pgServer) string { return "127.0.0.1:" + strconv.Itoa(pg.cluster.Port()) }

// databaseURL is the URL of the postgres database over hosts, as the
// trusted superuser; with several hosts (replicated) it asks for a session
// that accepts writes.
func databaseURL(hosts []string, replicated bool) string {
	url := "postgres://postgres@" + strings.Join(hosts, ",") + "/postgres?sslmode=disable"
	if replicated {
		url += "&target_session_attrs=read-write"
	}
	return url
}

// primary returns the server that accepts writes now (the one the database
// faults act on).
func (s *system) primary() *pgServer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pg
}

// failoverDelay is how long the soak waits between killing the primary and
// promoting the standby, as an operator (or Patroni) takes a moment to
// decide.
const failoverDelay = time.Second

// failover crashes the primary (an immediate shutdown: open connections
// break, WAL not yet sent to the standby is lost) and promotes the standby
// a second later; the processes find it through their multi-host URL.
// Then, so that the run can fail over again, it removes the dead primary
// and clones a new standby of the new primary (pg_basebackup) on the dead
// primary's port: every process's URL keeps naming the primary and the
// standby, whichever is which. A clone that fails leaves the run with a
// primary only: the failover is not injected again. Without a standby
// (-replication none) it does nothing.
func (s *system) failover(ctx context.Context, splitBrain bool) (bool, error) {
	s.mu.Lock()
	old, standby := s.pg, s.standby
	s.mu.Unlock()
	if standby == nil {
		return false, nil
	}
	start := time.Now()
	if err := old.killImmediate(); err != nil {
		return false, fmt.Errorf("error killing the primary: %w", err)
	}
	sleep(ctx, failoverDelay)
	if err := standby.promote(ctx); err != nil {
		// The standby cannot take over: bring the primary back, or the
		// run has no database at all.
		return true, errors.Join(err, old.startServer())
	}
	promoted := time.Now()
	s.mu.Lock()
	s.pg, s.standby = standby, nil
	s.mu.Unlock()
	s.ev.addFailover(FailoverEvent{Start: start, Promoted: promoted})
	// The database was down for the workers from the kill until the
	// promotion: should that outlast the stale window, a reap then is the
	// design (no-live-abandoned).
	s.ev.addOutage(Outage{Start: start, End: promoted})
	s.logger.Info("failover: primary killed, standby promoted", "old_port", old.cluster.Port(), "new_port", standby.cluster.Port(), "took", promoted.Sub(start).Round(time.Millisecond))
	if splitBrain {
		if err := s.splitBrain(ctx, old); err != nil {
			s.logger.Warn("split brain: error bringing the old primary back", "error", err)
		}
	}

	port := old.cluster.Port()
	if err := old.cluster.Stop(); err != nil {
		s.logger.Warn("failover: error removing the dead primary", "error", err)
	}
	began := time.Now()
	next, err := startNode(ctx, pglocal.Config{Logger: s.logger, StandbyOf: standby.cluster, Synchronous: s.cfg.replication == replicationSync, Port: port})
	if err != nil {
		return true, fmt.Errorf("error cloning a new standby of the new primary (no further failover this run): %w", err)
	}
	s.mu.Lock()
	s.standby = next
	s.mu.Unlock()
	s.logger.Info("failover: new standby streaming", "port", port, "took", time.Since(began).Round(time.Millisecond))
	return true, nil
}

// splitBrainWindow is how long the old primary answers read-write beside
// the promoted one in the split-brain fault.
const splitBrainWindow = 5 * time.Second

// splitBrain starts the killed primary again as it was, a primary on the
// old timeline accepting writes beside the promoted standby (a partition
// that heals, an operator restarting the old host), for splitBrainWindow,
// counts the rows written on it meanwhile, and kills it again. Every
// process's multi-host URL names it first: only their timeline fence keeps
// them off it.
func (s *system) splitBrain(ctx context.Context, old *pgServer) error {
	if err := old.startServer(); err != nil {
		return err
	}
	start := time.Now()
	conn, err := pgx.Connect(ctx, old.URL("postgres"))
	if err != nil {
		return errors.Join(fmt.Errorf("error connecting to the old primary: %w", err), old.killImmediate())
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var mark int64
	if err := conn.QueryRow(ctx, `SELECT txid_current() % 4294967296`).Scan(&mark); err != nil {
		return errors.Join(err, old.killImmediate())
	}
	sleep(ctx, splitBrainWindow)
	rows, countErr := rowsWrittenSince(ctx, conn, mark+1)
	end := time.Now()
	if err := old.killImmediate(); err != nil {
		return errors.Join(countErr, err)
	}
	s.ev.addSplitBrain(SplitBrainEvent{Start: start, End: end, Rows: rows, Err: errString(countErr)})
	s.logger.Info("split brain: the old primary answered read-write beside the promoted one", "window", end.Sub(start).Round(time.Millisecond), "rows_written_on_it", rows)
	return countErr
}

// rowsWrittenSince counts the rows of the public schema's tables written
// (inserted, or updated: a new row version) by transactions from xid on.
func rowsWrittenSince(ctx context.Context, conn *pgx.Conn, xid int64) (int, error) {
	rows, err := conn.Query(ctx, `SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = 'public'`)
	if err != nil {
		return 0, fmt.Errorf("error listing tables: %w", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("error listing tables: %w", err)
	}
	total := 0
	for _, table := range tables {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM public.`+table+` WHERE xmin::text::bigint >= $1`, xid).Scan(&n); err != nil {
			return total, fmt.Errorf("error counting rows of %s: %w", table, err)
		}
		total += n
	}
	return total, nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

package pgtest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/buildrisk/radar/sql/pglocal"
)

// replicaTimeout bounds one step of a failover (a promotion, a cut of the
// replication link).
const replicaTimeout = time.Minute

// ReplicatedOpts configures StartReplicated; nil is the defaults.
type ReplicatedOpts struct {
	// Synchronous makes the standby synchronous (synchronous_standby_names
	// on the primary, synchronous_commit on): a commit is acknowledged once
	// the standby has flushed it, so a failover loses no acknowledged
	// commit. Default asynchronous: the last commits acknowledged before
	// the primary dies may never reach the standby.
	Synchronous bool
}

// Replicated is production's database in small: a primary and its hot
// standby streaming from it, two private pglocal clusters of one test.
// Clients reach it through URL, a multi-host URL that finds whichever of
// the two accepts writes, as production's DATABASE_URL does; Failover
// crashes the primary and promotes the standby.
type Replicated struct {
	Primary *pglocal.Cluster
	Standby *pglocal.Cluster
}

// StartReplicated starts a primary and a standby of it (asynchronous unless
// opts say otherwise) and returns once the standby streams. Both are
// stopped, their directories removed, at the end of the test. It needs no
// Main: the clusters are the test's own, not the harness's.
func StartReplicated(t testing.TB, opts *ReplicatedOpts) *Replicated {
	t.Helper()
	if opts == nil {
		opts = &ReplicatedOpts{}
	}
	ctx := t.Context()
	primary, err := pglocal.Start(ctx, pglocal.Config{Replication: true})
	if err != nil {
		t.Fatalf("pgtest: error starting the primary: %v", err)
	}
	t.Cleanup(func() { stopCluster(t, primary) })
	standby, err := pglocal.Start(ctx, pglocal.Config{StandbyOf: primary, Synchronous: opts.Synchronous})
	if err != nil {
		t.Fatalf("pgtest: error starting the standby: %v", err)
	}
	// Cleanups run last in, first out: the standby goes first, while a
	// synchronous primary has nothing left to commit.
	t.Cleanup(func() { stopCluster(t, standby) })
	return &Replicated{Primary: primary, Standby: standby}
}

// stopCluster stops c at the end of a test, reporting an error.
func stopCluster(t testing.TB, c *pglocal.Cluster) {
	if err := c.Stop(); err != nil {
		t.Errorf("pgtest: error stopping postgres on port %d: %v", c.Port(), err)
	}
}

// URL returns the URL of database over both clusters, as the trusted
// superuser: MultiHostURL of the primary, then the standby.
func (r *Replicated) URL(database string) string {
	return MultiHostURL(database, r.Primary, r.Standby)
}

// MultiHostURL returns a URL of database naming every cluster, in order,
// with target_session_attrs=read-write, the form of a production
// DATABASE_URL in front of a primary and its replicas: a client (pgx, libpq)
// tries the hosts in turn and keeps the first that accepts writes, so after
// a failover every new connection lands on the promoted replica. It
// connects as the trusted superuser over TCP, like pglocal.Cluster.URL.
func MultiHostURL(database string, clusters ...*pglocal.Cluster) string {
	hosts := make([]string, len(clusters))
	for i, c := range clusters {
		hosts[i] = "127.0.0.1:" + strconv.Itoa(c.Port())
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write", strings.Join(hosts, ","), database)
}

// Failover does what a primary's crash and an operator's (or Patroni's)
// promotion do: it kills the primary (an immediate shutdown: open
// connections break, WAL not yet sent is lost) and promotes the standby,
// returning once the standby accepts writes. It does not wait for clients:
// they find the new primary through the multi-host URL on their next
// connection.
func (r *Replicated) Failover(ctx context.Context) error {
	r.Primary.Kill()
	return Promote(ctx, r.Standby)
}

// Promote promotes the standby c (pg_promote, as `pg_ctl promote` does)
// and returns once it has left recovery and accepts writes, on a new
// timeline.
func Promote(ctx context.Context, c *pglocal.Cluster) error {
	ctx, cancel := context.WithTimeout(ctx, replicaTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("error connecting to the standby on port %d: %w", c.Port(), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// pg_promote(false) signals the promotion and returns; the state is
	// polled in short statements below. Waiting inside pg_promote(true)
	// holds a snapshot the replay of the last WAL may conflict with: the
	// standby then waits max_standby_streaming_delay (30 s) and cancels
	// it (40001).
	var promoted bool
	if err := conn.QueryRow(ctx, "SELECT pg_promote(false)").Scan(&promoted); err != nil {
		return fmt.Errorf("error promoting the standby on port %d: %w", c.Port(), err)
	}
	for promoted {
		var inRecovery bool
		err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "40001":
			// Cancelled by a conflict with the replay: ask again.
		case err != nil:
			return fmt.Errorf("error reading the recovery state of port %d: %w", c.Port(), err)
		case !inRecovery:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("standby on port %d not promoted within %s: %w", c.Port(), replicaTimeout, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("standby on port %d not promoted within %s", c.Port(), replicaTimeout)
}

// CatchUp returns once the standby has replayed everything the primary
// had written when CatchUp was called: what was committed by then survives
// a Failover in either mode.
func (r *Replicated) CatchUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, replicaTimeout)
	defer cancel()
	primary, err := pgx.Connect(ctx, r.Primary.URL("postgres"))
	if err != nil {
		return fmt.Errorf("error connecting to the primary: %w", err)
	}
	defer primary.Close(context.WithoutCancel(ctx))
	var lsn string
	if err := primary.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		return fmt.Errorf("error reading the primary's WAL position: %w", err)
	}
	standby, err := pgx.Connect(ctx, r.Standby.URL("postgres"))
	if err != nil {
		return fmt.Errorf("error connecting to the standby: %w", err)
	}
	defer standby.Close(context.WithoutCancel(ctx))
	for {
		var done bool
		if err := standby.QueryRow(ctx, "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)", lsn).Scan(&done); err != nil {
			return fmt.Errorf("error reading the standby's replay position: %w", err)
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the standby has not replayed the primary's WAL up to %s: %w", lsn, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// CutReplication stops the standby from receiving the primary's WAL (its
// primary_conninfo emptied, its WAL receiver gone) while both keep
// running, and returns once the standby has stopped receiving. From then on
// the primary acknowledges commits the standby never sees, as an
// asynchronous standby lagging behind a primary that then dies does: a
// Failover afterwards loses them. On a synchronous pair, commits on the
// primary wait from then on.
func (r *Replicated) CutReplication(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, replicaTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.Standby.URL("postgres"))
	if err != nil {
		return fmt.Errorf("error connecting to the standby: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// ALTER SYSTEM cannot run in a transaction: one statement each.
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET primary_conninfo = ''"); err != nil {
		return fmt.Errorf("error emptying the standby's primary_conninfo: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("error reloading the standby's configuration: %w", err)
	}
	for {
		var receivers int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_wal_receiver").Scan(&receivers); err != nil {
			return fmt.Errorf("error reading the standby's WAL receiver: %w", err)
		}
		if receivers == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the standby still receives WAL: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Package pgfence keeps a process's connections off a demoted primary and
// its ids from being drawn twice across a failover.
//
// A Fence remembers, per database system (pg_control_system's identifier,
// kept by every physical replica), the highest timeline the process has
// seen. Install hooks a pool's connections to it:
//
//   - Before a connection is accepted (pgconn's ValidateConnect, which pgx
//     runs per host of a multi-host URL, trying the next host when it
//     fails), the server's identity is read; a read-write server of a known
//     system on a lower timeline than one seen already is refused: it is a
//     demoted primary, restarted or partitioned off, still answering
//     read-write.
//   - On a primary, before the connection's first use, the id fence runs
//     (queries.DatabaseTimelineFence): the service's sequences move past
//     every value an earlier timeline could have issued, once per timeline.
//   - Before each use (pgxpool's PrepareConn), a connection whose server the
//     fence now knows to be behind is destroyed instead, and one made to a
//     standby that has since been promoted is replaced by a new one (which
//     runs the id fence).
//
// Probe reads the identity of every host of a URL, so that a process learns
// of a newer timeline on a host it is not connected to, and reports two
// read-write hosts of one system: a split brain.
//
// A process has one fence (Process): the timelines it has seen are a fact
// about the process, whichever pool saw them.
package pgfence

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/queries"
)

// Identity is what a server says of itself: the system it belongs to, the
// timeline it is on, and whether it is a standby.
type Identity struct {
	// Host is the host:port the identity was read from.
	Host string
	// SystemIdentifier is the cluster's identifier, kept by its replicas.
	SystemIdentifier int64
	// Timeline is the timeline the server writes WAL on (a standby's: its
	// last restartpoint's).
	Timeline int64
	// InRecovery is true on a standby.
	InRecovery bool
}

// String returns the identity as logs print it.
func (id Identity) String() string {
	s := fmt.Sprintf("%s: system %d, timeline %d", id.Host, id.SystemIdentifier, id.Timeline)
	if id.InRecovery {
		s += " (standby)"
	}
	return s
}

// StaleError refuses a connection to a read-write server on a timeline
// below the highest the process has seen of the same system.
type StaleError struct {
	Identity Identity
	Highest  int64
}

// Error says which server was refused and why.
func (e *StaleError) Error() string {
	return fmt.Sprintf("refusing %s: timeline %d of that system was seen already (a demoted primary)", e.Identity, e.Highest)
}

// identitySQL reads a server's identity as queries.DatabaseIdentity does.
// It is sent on a bare pgconn.PgConn (ValidateConnect gets nothing more),
// where the generated queries cannot run.
const identitySQL = `SELECT s.system_identifier,
       CASE WHEN pg_is_in_recovery() THEN c.timeline_id::bigint
            ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint END,
       pg_is_in_recovery()
FROM pg_control_system() s, pg_control_checkpoint() c`

// customDataKey is where a connection keeps the identity it was made with.
const customDataKey = "buildrisk.pgfence.identity"

// undefinedFunction is SQLSTATE 42883: a schema older than the id fence
// (radar migrate connects before it has run its migrations).
const undefinedFunction = "42883"

// ReadIdentity reads the identity of the server conn is connected to.
func ReadIdentity(ctx context.Context, conn *pgconn.PgConn) (Identity, error) {
	results, err := conn.Exec(ctx, identitySQL).ReadAll()
	if err != nil {
		return Identity{}, fmt.Errorf("error reading the server's identity: %w", err)
	}
	if len(results) != 1 || len(results[0].Rows) != 1 || len(results[0].Rows[0]) != 3 {
		return Identity{}, errors.New("error reading the server's identity: unexpected result")
	}
	row := results[0].Rows[0]
	id := Identity{Host: hostPort(conn), InRecovery: string(row[2]) == "t"}
	if id.SystemIdentifier, err = strconv.ParseInt(string(row[0]), 10, 64); err != nil {
		return Identity{}, fmt.Errorf("error reading the server's system identifier: %w", err)
	}
	if id.Timeline, err = strconv.ParseInt(string(row[1]), 10, 64); err != nil {
		return Identity{}, fmt.Errorf("error reading the server's timeline: %w", err)
	}
	return id, nil
}

// hostPort names the server conn reached.
func hostPort(conn *pgconn.PgConn) string {
	if addr := conn.Conn().RemoteAddr(); addr != nil {
		return addr.String()
	}
	return ""
}

// Fence remembers the highest timeline seen of each database system. Its
// methods are safe for concurrent use.
type Fence struct {
	mu      sync.Mutex
	highest map[int64]int64
}

// New returns a fence that has seen nothing.
func New() *Fence {
	return &Fence{highest: map[int64]int64{}}
}

var process = New()

// Process returns the process's fence, which every pool of the service
// installs (dbpool) and the database watch feeds.
func Process() *Fence {
	return process
}

// Observe records id and returns a *StaleError when id is a read-write
// server on a timeline below the highest seen of its system. A standby is
// never refused (it takes no writes) and its timeline, which lags its
// primary's, is recorded like any other: it never exceeds the truth.
func (f *Fence) Observe(id Identity) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	highest, known := f.highest[id.SystemIdentifier]
	if !known || id.Timeline > highest {
		f.highest[id.SystemIdentifier] = id.Timeline
		return nil
	}
	if !id.InRecovery && id.Timeline < highest {
		return &StaleError{Identity: id, Highest: highest}
	}
	return nil
}

// Stale reports whether id is a read-write server behind the highest
// timeline seen of its system, without recording anything.
func (f *Fence) Stale(id Identity) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !id.InRecovery && id.Timeline < f.highest[id.SystemIdentifier]
}

// Highest returns the highest timeline seen of system (0: none).
func (f *Fence) Highest(system int64) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.highest[system]
}

// Install hooks cfg's connections to f (see the package doc). It keeps the
// ValidateConnect, AfterConnect and PrepareConn cfg already has and runs
// them first.
func (f *Fence) Install(cfg *pgxpool.Config) {
	validate := cfg.ConnConfig.ValidateConnect
	cfg.ConnConfig.ValidateConnect = func(ctx context.Context, conn *pgconn.PgConn) error {
		if validate != nil {
			if err := validate(ctx, conn); err != nil {
				return err
			}
		}
		return f.validate(ctx, conn)
	}
	afterConnect := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if afterConnect != nil {
			if err := afterConnect(ctx, conn); err != nil {
				return err
			}
		}
		return fenceIDs(ctx, conn)
	}
	prepare := cfg.PrepareConn
	cfg.PrepareConn = func(ctx context.Context, conn *pgx.Conn) (bool, error) {
		if prepare != nil {
			if ok, err := prepare(ctx, conn); !ok || err != nil {
				return ok, err
			}
		}
		return f.prepare(ctx, conn)
	}
}

// validate reads the identity of the server conn reached, refuses a demoted
// primary and keeps the identity on the connection.
func (f *Fence) validate(ctx context.Context, conn *pgconn.PgConn) error {
	id, err := ReadIdentity(ctx, conn)
	if err != nil {
		return err
	}
	if err := f.Observe(id); err != nil {
		return err
	}
	conn.CustomData()[customDataKey] = id
	return nil
}

// fenceIDs runs the id fence on a primary before the connection's first
// use. A schema without the fence (older than migration 00020) is left
// alone: only radar migrate connects to one.
func fenceIDs(ctx context.Context, conn *pgx.Conn) error {
	id, ok := conn.PgConn().CustomData()[customDataKey].(Identity)
	if ok && id.InRecovery {
		return nil
	}
	if _, err := queries.New().DatabaseTimelineFence(ctx, conn); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == undefinedFunction {
			return nil
		}
		return fmt.Errorf("error fencing the ids of the database's timeline: %w", err)
	}
	return nil
}

// prepare refuses a connection to a server now known to be behind, and
// replaces one made to a standby that has been promoted since (its
// replacement runs the id fence before its first use).
func (f *Fence) prepare(ctx context.Context, conn *pgx.Conn) (bool, error) {
	id, ok := conn.PgConn().CustomData()[customDataKey].(Identity)
	if !ok {
		return true, nil
	}
	if f.Stale(id) {
		return false, nil
	}
	if id.InRecovery {
		now, err := queries.New().DatabaseIdentity(ctx, conn)
		if err != nil {
			return false, nil
		}
		return now.InRecovery, nil
	}
	return true, nil
}

// probeTimeout bounds the connection to one host of a Probe.
const probeTimeout = 2 * time.Second

// Probe reads the identity of every host cfg names (its first host and
// its fallbacks, each once), each on a connection of its own bounded by
// probeTimeout, records each in f, and returns the identities read and the
// hosts that did not answer. It never fails as a whole: a host down is
// simply not among the identities.
func (f *Fence) Probe(ctx context.Context, cfg *pgconn.Config) ([]Identity, []error) {
	var (
		ids  []Identity
		errs []error
	)
	for _, host := range hosts(cfg) {
		id, err := probeHost(ctx, cfg, host)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		_ = f.Observe(id) // a stale host is what the caller looks for
		ids = append(ids, id)
	}
	return ids, errs
}

// hosts returns each distinct host:port of cfg in order (sslmode=prefer
// lists every host twice, with and without TLS).
func hosts(cfg *pgconn.Config) []*pgconn.FallbackConfig {
	all := append([]*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port, TLSConfig: cfg.TLSConfig}}, cfg.Fallbacks...)
	seen := map[string]bool{}
	var out []*pgconn.FallbackConfig
	for _, h := range all {
		key := net.JoinHostPort(h.Host, strconv.Itoa(int(h.Port)))
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, h)
	}
	return out
}

// probeHost connects to host alone, with none of the pool's hooks, and
// reads its identity.
func probeHost(ctx context.Context, cfg *pgconn.Config, host *pgconn.FallbackConfig) (Identity, error) {
	one := cfg.Copy()
	one.Host, one.Port, one.TLSConfig = host.Host, host.Port, host.TLSConfig
	one.Fallbacks = nil
	one.ValidateConnect, one.AfterConnect = nil, nil
	if one.ConnectTimeout == 0 || one.ConnectTimeout > probeTimeout {
		one.ConnectTimeout = probeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	conn, err := pgconn.ConnectConfig(ctx, one)
	if err != nil {
		return Identity{}, fmt.Errorf("error probing %s:%d: %w", host.Host, host.Port, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return ReadIdentity(ctx, conn)
}

// SplitBrain returns, per system, the read-write hosts among ids when more
// than one of them answers read-write: two primaries of one system.
func SplitBrain(ids []Identity) map[int64][]Identity {
	primaries := map[int64][]Identity{}
	for _, id := range ids {
		if !id.InRecovery {
			primaries[id.SystemIdentifier] = append(primaries[id.SystemIdentifier], id)
		}
	}
	for system, list := range primaries {
		if len(list) < 2 {
			delete(primaries, system)
		}
	}
	return primaries
}

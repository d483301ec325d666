// Package pglocal runs a private, throwaway PostgreSQL cluster from the
// server binaries installed on this machine. It backs `radar dev` and the
// pgtest harness, so that neither needs a server to be set up by hand nor
// ever touches one that happens to be running already.
//
// A cluster lives in its own temporary directory (data directory, Unix
// socket, server log and an owner file), listens on 127.0.0.1 only, trusts
// every local connection and trades durability for speed (fsync off). It is
// removed by Cluster.Stop. When the owning process dies without calling Stop,
// the kernel kills the postmaster through the parent-death signal, and the
// next Start in any process sweeps the directory (and, should the server
// somehow have survived, kills it), so a crashed run never leaves a server
// that gets in the way of the next one.
//
// A cluster can also be one half of a streaming replication pair, for tests
// of a failover: a primary (Config.Replication) and a standby cloned from it
// with pg_basebackup (Config.StandbyOf), asynchronous or synchronous
// (Config.Synchronous). Cluster.Kill crashes a server the way an immediate
// shutdown does; promoting the standby is plain SQL (pg_promote), which the
// pgtest harness wraps.
//
// PostgreSQL refuses to run as root: when the calling process is root, initdb,
// pg_basebackup and postgres run as the `postgres` system user instead.
package pglocal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrBinariesNotFound is returned (wrapped) by Start when the PostgreSQL
// server binaries initdb and postgres cannot be found.
var ErrBinariesNotFound = errors.New("postgresql server binaries (initdb, postgres) not found in $PATH, `pg_config --bindir` or /usr/lib/postgresql/*/bin: " +
	"install them with `apt-get install postgresql` (Debian/Ubuntu) or set DATABASE_URL to use an existing server")

const (
	// dirPattern names every cluster directory; sweepStale relies on it.
	dirPattern = "buildrisk-pglocal-*"

	// ownerFileName is the file in a cluster directory holding the pid (and
	// process start time) of the process that owns the cluster.
	ownerFileName = "owner.pid"

	// dataDirName, logFileName name the data directory and the server log
	// inside a cluster directory. The Unix socket lives in the cluster
	// directory itself.
	dataDirName = "data"
	logFileName = "postgres.log"

	// superuser is the database superuser created by initdb.
	superuser = "postgres"

	// systemUser is the operating system user initdb and postgres run as when
	// the calling process is root.
	systemUser = "postgres"

	// stopTimeout is how long Stop waits for a fast shutdown before it kills
	// the postmaster.
	stopTimeout = 10 * time.Second

	// killTimeout is how long Kill waits for an immediate shutdown before it
	// sends SIGKILL.
	killTimeout = 5 * time.Second

	// freePortMin and freePortMax bound the ports FreePort picks: below the
	// kernel's ephemeral range (Linux: 32768-60999), which outgoing
	// connections take their local ports from. A cluster's port picked
	// there could be held, a moment later, by some process's outgoing
	// connection, and a cluster that is halted and resumed, or crashed and
	// restarted, must get its port back.
	freePortMin = 20000
	freePortMax = 32767

	// maxSocketPathLen is the longest Unix socket path Linux accepts
	// (sizeof(sun_path) minus the terminating NUL).
	maxSocketPathLen = 107

	// logTailBytes is how much of the server log an error message quotes.
	logTailBytes = 4 << 10

	// freshDirGrace protects a cluster directory that has no owner file yet
	// because another process is still creating it.
	freshDirGrace = time.Minute
)

// StartTimeoutDefault is the default of Config.StartTimeout.
const StartTimeoutDefault = 30 * time.Second

// Config configures Start. The zero value is valid: every field has a
// default, applied together with validation by Config.withDefaults.
type Config struct {
	// BinDir is the directory holding initdb and postgres. When empty, it is
	// discovered: first $PATH (a directory holding both), then the output of
	// `pg_config --bindir`, then the newest /usr/lib/postgresql/*/bin.
	BinDir string

	// Port is the TCP port the server listens on, on 127.0.0.1. When zero, a
	// free port is picked, and Start retries with another one should it be
	// taken before the server binds it.
	Port int

	// Logger receives progress and sweep messages. When nil, they are
	// discarded.
	Logger *slog.Logger

	// StartTimeout bounds how long Start waits for the server to accept
	// connections once it has been launched (and, for a standby, to stream
	// from its primary). Defaults to StartTimeoutDefault.
	StartTimeout time.Duration

	// Replication makes the cluster a primary that standbys (StandbyOf) can
	// stream from: wal_level replica and WAL senders, as a production
	// primary runs. Unlike a plain cluster, it commits synchronously
	// (synchronous_commit on): a commit is acknowledged once its WAL reached
	// the kernel, so a crash of the server's processes (Kill) loses nothing
	// acknowledged, and a synchronous standby's guarantee holds. Replication
	// connections from 127.0.0.1 are trusted, as every connection is.
	Replication bool

	// StandbyOf, when not nil, makes the new cluster a hot standby of that
	// cluster, which must run with Replication: its data directory is a
	// pg_basebackup of the primary (from the same BinDir, which must hold
	// pg_basebackup), it streams the primary's WAL and answers read-only
	// queries. Start returns once it streams. The standby runs with
	// Replication itself, so that once promoted it is a primary like the
	// first one.
	StandbyOf *Cluster

	// Synchronous, with StandbyOf, makes the standby synchronous: Start sets
	// the primary's synchronous_standby_names to the standby's
	// application_name and returns once the primary reports it in sync.
	// From then on every commit on the primary waits until the standby has
	// flushed its WAL (synchronous_commit on), so a failover to the standby
	// loses no acknowledged commit. Without a standby to answer, commits on
	// the primary wait. The setting is written to the primary only, after
	// the standby was cloned: a standby promoted later does not wait for a
	// standby of its own.
	Synchronous bool
}

// withDefaults returns a copy of the configuration with every default applied,
// or an error when a field is invalid. It is the only place defaults and
// validation live.
func (c Config) withDefaults() (Config, error) {
	if c.Port < 0 || c.Port > 65535 {
		return c, fmt.Errorf("invalid port %d: must be between 0 and 65535", c.Port)
	}
	if c.StartTimeout < 0 {
		return c, fmt.Errorf("invalid start timeout %s: must not be negative", c.StartTimeout)
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = StartTimeoutDefault
	}
	if c.Synchronous && c.StandbyOf == nil {
		return c, errors.New("invalid replication: Synchronous needs StandbyOf")
	}
	if c.StandbyOf != nil {
		if !c.StandbyOf.cfg.replicates() {
			return c, errors.New("invalid replication: the primary of a standby must run with Replication")
		}
		c.Replication = true
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.BinDir == "" {
		binDir, err := findBinDir()
		if err != nil {
			return c, err
		}
		c.BinDir = binDir
	} else if !hasServerBinaries(c.BinDir) {
		return c, fmt.Errorf("bin dir %q does not hold both initdb and postgres: %w", c.BinDir, ErrBinariesNotFound)
	}
	if c.StandbyOf != nil {
		if _, err := clientBinary(c.BinDir, "pg_basebackup"); err != nil {
			return c, err
		}
	}
	return c, nil
}

// clientBinary returns the path of the client program name (pg_basebackup)
// of the installation whose server binaries are in binDir: binDir's own, or,
// when binDir holds only links to the server (a /usr/local/bin with
// initdb and postgres linked there), the one beside the server binary
// postgres links to, so that both always come from the same version.
func clientBinary(binDir, name string) (string, error) {
	candidates := []string{filepath.Join(binDir, name)}
	if postgres, err := filepath.EvalSymlinks(filepath.Join(binDir, "postgres")); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(postgres), name))
	}
	for _, path := range candidates {
		if info, err := os.Stat(path); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return path, nil
		}
	}
	return "", fmt.Errorf("no %s beside the server binaries of %q (tried %s): %w", name, binDir, strings.Join(candidates, ", "), ErrBinariesNotFound)
}

// replicates reports whether a cluster of this configuration runs as a
// replication primary (or a standby that can become one).
func (c Config) replicates() bool {
	return c.Replication || c.StandbyOf != nil
}

// Cluster is a running throwaway PostgreSQL cluster started by Start. Its
// methods are safe for concurrent use.
type Cluster struct {
	dir    string // cluster directory, removed by Stop
	port   int
	logger *slog.Logger

	// What Resume needs to launch the postmaster again.
	cfg       Config
	socketDir string
	cred      *syscall.Credential

	// mu guards cmd and exited, which Resume replaces.
	mu     sync.Mutex
	cmd    *exec.Cmd     // the postmaster
	exited chan struct{} // closed once the postmaster has been reaped

	stopOnce sync.Once
	stopErr  error
}

// Start creates a cluster in a fresh temporary directory, launches its
// postmaster and waits until it accepts connections. Before that, it sweeps
// clusters left behind by processes that died (see sweepStale). ctx bounds
// the whole start-up; once Start has returned, the cluster lives until Stop
// (or until this process dies).
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	return start(ctx, cfg, os.TempDir())
}

// start is Start with the directory clusters are created in (and swept from)
// made explicit, so tests can keep theirs apart.
func start(ctx context.Context, cfg Config, root string) (*Cluster, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("error configuring local postgres: %w", err)
	}
	sweepStale(cfg.Logger, root)

	cred, err := childCredential()
	if err != nil {
		return nil, err
	}

	dir, err := os.MkdirTemp(root, dirPattern)
	if err != nil {
		return nil, fmt.Errorf("error creating cluster directory: %w", err)
	}
	cluster, err := startIn(ctx, cfg, dir, cred)
	if err != nil {
		if removeErr := removeDir(dir); removeErr != nil {
			cfg.Logger.Warn("pglocal: error removing cluster directory", "dir", dir, "error", removeErr)
		}
		return nil, err
	}
	return cluster, nil
}

// startIn initializes a cluster in dir and launches it. On error, the caller
// removes dir; any process started here is dead by then.
func startIn(ctx context.Context, cfg Config, dir string, cred *syscall.Credential) (*Cluster, error) {
	// The owner file goes first, so a concurrent sweep never mistakes this
	// directory for an abandoned one.
	if err := writeOwnerFile(dir); err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("error handing cluster directory to the %s user: %w", systemUser, err)
		}
	}

	begin := time.Now()
	if cfg.StandbyOf != nil {
		if err := cloneStandby(ctx, cfg, dir, cred); err != nil {
			return nil, err
		}
		cfg.Logger.Debug("pglocal: pg_basebackup done", "dir", dir, "primary_port", cfg.StandbyOf.port, "duration", time.Since(begin))
	} else {
		if err := initdb(ctx, cfg, dir, cred); err != nil {
			return nil, err
		}
		cfg.Logger.Debug("pglocal: initdb done", "dir", dir, "duration", time.Since(begin))
	}

	// The socket directory must be short enough for a Unix socket path; when
	// $TMPDIR is too deep, Unix sockets are turned off, TCP is all we use.
	socketDir := dir
	if len(filepath.Join(dir, ".s.PGSQL.65535")) > maxSocketPathLen {
		socketDir = ""
	}

	// With an automatically picked port, another process may take the port
	// between picking and binding it; the server then exits at once, and we
	// try again with a fresh port.
	const maxAttempts = 3
	for attempt := 1; ; attempt++ {
		port := cfg.Port
		if port == 0 {
			var err error
			if port, err = FreePort(); err != nil {
				return nil, err
			}
		}
		cluster, err := launch(ctx, cfg, dir, socketDir, port, cred)
		if err == nil && cfg.StandbyOf != nil {
			if err := cluster.joinPrimary(ctx); err != nil {
				cluster.kill()
				return nil, err
			}
		}
		if err == nil {
			cfg.Logger.Info("pglocal: postgres started", "dir", dir, "port", port, "standby", cfg.StandbyOf != nil, "duration", time.Since(begin))
			return cluster, nil
		}
		if cfg.Port != 0 || attempt == maxAttempts || !errors.Is(err, errPortInUse) {
			return nil, err
		}
		cfg.Logger.Debug("pglocal: port taken, retrying", "port", port)
	}
}

// initdb creates a fresh data directory in dir.
func initdb(ctx context.Context, cfg Config, dir string, cred *syscall.Credential) error {
	cmd := exec.CommandContext(ctx, filepath.Join(cfg.BinDir, "initdb"),
		"-D", filepath.Join(dir, dataDirName),
		"-U", superuser,
		"--auth=trust",
		"-E", "UTF8",
		"--locale=C",
		"--no-sync",
	)
	cmd.Dir = dir
	cmd.Env = childEnv()
	cmd.SysProcAttr = sysProcAttr(cred)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("error running initdb: %w\n%s", err, bytes.TrimSpace(out))
	}
	return nil
}

// standbyName returns the application_name a standby in dir connects to
// its primary with, which the primary's synchronous_standby_names names:
// unique per cluster directory, and a plain identifier.
func standbyName(dir string) string {
	return strings.NewReplacer("-", "_", ".", "_").Replace(filepath.Base(dir))
}

// cloneStandby fills dir's data directory with a base backup of
// cfg.StandbyOf taken with pg_basebackup, which also writes standby.signal
// and the primary_conninfo (-R) the standby streams with, under the
// application_name standbyName(dir).
func cloneStandby(ctx context.Context, cfg Config, dir string, cred *syscall.Credential) error {
	primary := cfg.StandbyOf
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=%s sslmode=disable application_name=%s", primary.port, superuser, standbyName(dir))
	basebackup, err := clientBinary(cfg.BinDir, "pg_basebackup")
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, basebackup,
		"-D", filepath.Join(dir, dataDirName),
		"-d", conninfo,
		"-R",
		"-X", "stream",
		"-c", "fast",
		"--no-sync",
	)
	cmd.Dir = dir
	cmd.Env = childEnv()
	cmd.SysProcAttr = sysProcAttr(cred)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("error running pg_basebackup of the primary on port %d: %w\n%s", primary.port, err, bytes.TrimSpace(out))
	}
	return nil
}

// joinPrimary waits until this standby streams from its primary and, when
// the configuration asks for it, makes it the primary's synchronous
// standby.
func (c *Cluster) joinPrimary(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	primary := c.cfg.StandbyOf
	conn, err := pgx.Connect(ctx, primary.URL("postgres"))
	if err != nil {
		return fmt.Errorf("error connecting to the primary on port %d: %w", primary.port, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	name := standbyName(c.dir)
	want := "async"
	if c.cfg.Synchronous {
		want = "sync"
		// ALTER SYSTEM cannot run in a transaction: one statement each.
		if _, err := conn.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = "+quoteLiteral(pgx.Identifier{name}.Sanitize())); err != nil {
			return fmt.Errorf("error setting the primary's synchronous_standby_names: %w", err)
		}
		if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			return fmt.Errorf("error reloading the primary's configuration: %w", err)
		}
	}
	for {
		var state string
		err := conn.QueryRow(ctx, "SELECT sync_state FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'", name).Scan(&state)
		if err == nil && state == want {
			return nil
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("error reading the primary's replication state: %w", err)
		}
		select {
		case <-c.exited:
			return fmt.Errorf("standby exited while joining its primary (%s)\nserver log (%s):\n%s", c.cmd.ProcessState, c.logPath(), logTail(c.logPath()))
		case <-ctx.Done():
			return fmt.Errorf("standby on port %d not streaming %s from its primary: %w\nserver log (%s):\n%s", c.port, want, ctx.Err(), c.logPath(), logTail(c.logPath()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// logPath returns the path of the server log.
func (c *Cluster) logPath() string {
	return filepath.Join(c.dir, logFileName)
}

// errPortInUse marks a launch that failed because the port was taken.
var errPortInUse = errors.New("port already in use")

// launch runs the postmaster on port and waits until it accepts connections.
// On error, the postmaster is dead and reaped.
func launch(ctx context.Context, cfg Config, dir, socketDir string, port int, cred *syscall.Credential) (*Cluster, error) {
	logPath := filepath.Join(dir, logFileName)
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("error creating server log: %w", err)
	}
	// The child keeps its own descriptor; ours is not needed past Start.
	defer logFile.Close()

	// Not exec.CommandContext: the server must outlive ctx.
	cmd := exec.Command(filepath.Join(cfg.BinDir, "postgres"), serverArgs(cfg, dir, socketDir, port)...)
	cmd.Dir = dir
	cmd.Env = childEnv()
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	attr := sysProcAttr(cred)
	// Our own process group keeps a terminal's Ctrl-C away from the server,
	// so `radar dev` can still use the database while it shuts down; Stop
	// (or the parent-death signal) ends it.
	attr.Setpgid = true
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("error starting postgres: %w", err)
	}

	c := &Cluster{
		dir:       dir,
		port:      port,
		logger:    cfg.Logger,
		cfg:       cfg,
		socketDir: socketDir,
		cred:      cred,
		cmd:       cmd,
		exited:    make(chan struct{}),
	}
	go func() {
		_ = cmd.Wait()
		close(c.exited)
	}()

	if err := c.waitReady(ctx, cfg.StartTimeout); err != nil {
		c.kill()
		tail := logTail(logPath)
		if strings.Contains(tail, "Address already in use") {
			err = fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return nil, fmt.Errorf("error starting postgres on port %d: %w\nserver log (%s):\n%s", port, err, logPath, tail)
	}
	return c, nil
}

// serverArgs returns the postmaster's command line: fast rather than
// durable (no fsync, no full-page writes; nothing here survives a crash of
// the machine anyway) and, without replication, with asynchronous commits.
func serverArgs(cfg Config, dir, socketDir string, port int) []string {
	args := []string{
		"-D", filepath.Join(dir, dataDirName),
		"-p", strconv.Itoa(port),
		"-k", socketDir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=200",
		"-c", "shared_buffers=32MB",
	}
	if !cfg.replicates() {
		return append(args, "-c", "synchronous_commit=off")
	}
	return append(args,
		"-c", "wal_level=replica",
		"-c", "max_wal_senders=10",
		"-c", "wal_keep_size=256MB",
		"-c", "hot_standby=on",
		// A standby whose primary is gone retries every second, not every 5.
		"-c", "wal_retrieve_retry_interval=1s",
	)
}

// waitReady polls the server until a connection succeeds, the postmaster
// exits, ctx ends or timeout elapses.
func (c *Cluster) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	connConfig, err := pgx.ParseConfig(c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("error parsing connection url: %w", err)
	}
	connConfig.ConnectTimeout = time.Second

	var lastErr error
	for {
		lastErr = c.ping(ctx, connConfig)
		if lastErr == nil {
			return nil
		}
		select {
		case <-c.exited:
			return fmt.Errorf("postgres exited during start-up (%s)", c.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("postgres not accepting connections: %w (last error: %w)", ctx.Err(), lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ping connects to the server and checks that it is this cluster's: until
// our postmaster has bound the port, another server may answer there.
func (c *Cluster) ping(ctx context.Context, connConfig *pgx.ConnConfig) error {
	conn, err := pgx.ConnectConfig(ctx, connConfig)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var dataDir string
	if err := conn.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dataDir); err != nil {
		return fmt.Errorf("error querying data directory: %w", err)
	}
	if want := filepath.Join(c.dir, dataDirName); dataDir != want {
		return fmt.Errorf("another server answers on port %d (data directory %s)", c.port, dataDir)
	}
	return nil
}

// URL returns a connection URL for database on this cluster, as the trusted
// superuser over TCP.
func (c *Cluster) URL(database string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", superuser, c.port, database)
}

// Port returns the TCP port the cluster listens on, on 127.0.0.1.
func (c *Cluster) Port() int {
	return c.port
}

// Stop shuts the cluster down (fast shutdown: open transactions are rolled
// back, connections are closed), kills it if it has not exited within ten
// seconds, and removes its directory. It is idempotent and safe to call
// concurrently, for instance from a signal handler and a deferred call; every
// call returns once the cluster is gone, with the same result.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		c.stopErr = c.stop()
	})
	return c.stopErr
}

func (c *Cluster) stop() error {
	var errs []error
	if err := c.shutdown(); err != nil {
		errs = append(errs, err)
	}
	if err := removeDir(c.dir); err != nil {
		errs = append(errs, fmt.Errorf("error removing cluster directory: %w", err))
	}
	c.logger.Info("pglocal: postgres stopped", "dir", c.dir, "port", c.port)
	return errors.Join(errs...)
}

// shutdown asks the postmaster for a fast shutdown (SIGINT: open
// transactions roll back, connections are closed) and waits until it has
// exited, killing it past stopTimeout. An exited postmaster is left alone.
func (c *Cluster) shutdown() error {
	c.mu.Lock()
	cmd, exited := c.cmd, c.exited
	c.mu.Unlock()
	var err error
	if signalErr := cmd.Process.Signal(syscall.SIGINT); signalErr != nil && !errors.Is(signalErr, os.ErrProcessDone) {
		err = fmt.Errorf("error signalling postgres: %w", signalErr)
	}
	select {
	case <-exited:
	case <-time.After(stopTimeout):
		c.logger.Warn("pglocal: postgres did not shut down in time, killing it", "pid", cmd.Process.Pid, "timeout", stopTimeout)
		c.Kill()
	}
	return err
}

// Kill crashes the server as far as its clients and standbys can tell: an
// immediate shutdown (SIGQUIT to the postmaster, as `pg_ctl stop -m
// immediate` sends), in which every server process exits at once, without a
// checkpoint: connections break, open transactions are gone, and WAL not yet
// sent to a standby never reaches it. It returns once the postmaster has
// exited, sending SIGKILL if it has not within five seconds. Like Halt, it
// keeps the cluster's directory: Resume starts the server again (with crash
// recovery), Stop removes it. Stop uses it on a server that ignores a fast
// shutdown; tests use it to crash a primary before promoting its standby.
func (c *Cluster) Kill() {
	c.mu.Lock()
	cmd, exited := c.cmd, c.exited
	c.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-exited:
	case <-time.After(killTimeout):
		c.kill()
	}
	c.logger.Info("pglocal: postgres killed", "dir", c.dir, "port", c.port)
}

// Halt shuts the server down like Stop (fast shutdown) but keeps the
// cluster: its directory, data and port stay, and Resume starts it again.
// While halted, connections to it are refused. Tests use it to cut the
// database for a while, like an outage or `pg_ctl restart -m fast`.
func (c *Cluster) Halt() error {
	if err := c.shutdown(); err != nil {
		return err
	}
	c.logger.Info("pglocal: postgres halted", "dir", c.dir, "port", c.port)
	return nil
}

// Resume starts a halted cluster again on the same port and data directory
// and waits until it accepts connections. It does nothing if the server
// runs.
func (c *Cluster) Resume(ctx context.Context) error {
	c.mu.Lock()
	exited := c.exited
	c.mu.Unlock()
	select {
	case <-exited:
	default:
		return nil
	}
	next, err := launch(ctx, c.cfg, c.dir, c.socketDir, c.port, c.cred)
	if err != nil {
		return fmt.Errorf("error resuming postgres: %w", err)
	}
	c.mu.Lock()
	c.cmd, c.exited = next.cmd, next.exited
	c.mu.Unlock()
	c.logger.Info("pglocal: postgres resumed", "dir", c.dir, "port", c.port)
	return nil
}

// kill sends SIGKILL to the postmaster and waits until it has been reaped.
// Backends notice the postmaster's death and exit on their own.
func (c *Cluster) kill() {
	c.mu.Lock()
	cmd, exited := c.cmd, c.exited
	c.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// sweepStale removes the clusters in root whose owning process is gone: it
// kills a postmaster still running there (SIGKILL) and removes the
// directory. Clusters of live processes are left alone. Start calls it;
// errors are logged to logger, not returned, since a sweep is best effort.
func sweepStale(logger *slog.Logger, root string) {
	dirs, err := filepath.Glob(filepath.Join(root, dirPattern))
	if err != nil {
		logger.Warn("pglocal: error listing stale clusters", "error", err)
		return
	}
	for _, dir := range dirs {
		if err := sweepDir(logger, dir); err != nil {
			logger.Warn("pglocal: error sweeping stale cluster", "dir", dir, "error", err)
		}
	}
}

// sweepDir removes dir if its owner is dead, killing its postmaster first.
func sweepDir(logger *slog.Logger, dir string) error {
	info, err := os.Lstat(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // swept by someone else meanwhile
		}
		return err
	}
	if !info.IsDir() {
		return nil
	}
	owner, err := readOwnerFile(dir)
	switch {
	case errors.Is(err, os.ErrNotExist), errors.Is(err, errOwnerGarbled):
		// Either still being created by another process, or abandoned before
		// the owner file was written (in which case nothing ever ran there).
		if time.Since(info.ModTime()) < freshDirGrace {
			return nil
		}
	case errors.Is(err, os.ErrPermission):
		return nil // another user's cluster: not ours to judge
	case err != nil:
		return err
	case owner.alive():
		return nil
	}

	if pid, ok := postmasterPID(filepath.Join(dir, dataDirName)); ok {
		logger.Warn("pglocal: killing postgres of a dead process", "dir", dir, "pid", pid)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("error killing stale postgres %d: %w", pid, err)
		}
		waitGone(pid, 5*time.Second)
	}
	logger.Info("pglocal: removing stale cluster", "dir", dir)
	return removeDir(dir)
}

// owner identifies the process owning a cluster. The start time guards
// against the pid having been reused since.
type owner struct {
	pid       int
	startTime string // empty when unknown
}

// errOwnerGarbled is returned by readOwnerFile when the owner file does not
// hold a pid.
var errOwnerGarbled = errors.New("owner file holds no pid")

// writeOwnerFile records this process as the owner of the cluster in dir. The
// file appears complete or not at all, so a concurrent sweep never reads a
// half-written one.
func writeOwnerFile(dir string) error {
	pid := os.Getpid()
	content := strconv.Itoa(pid) + "\n" + processStartTime(pid) + "\n"
	tmp := filepath.Join(dir, ownerFileName+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return fmt.Errorf("error writing owner file: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, ownerFileName)); err != nil {
		return fmt.Errorf("error writing owner file: %w", err)
	}
	return nil
}

// readOwnerFile reads the owner of the cluster in dir.
func readOwnerFile(dir string) (owner, error) {
	data, err := os.ReadFile(filepath.Join(dir, ownerFileName))
	if err != nil {
		return owner{}, err
	}
	lines := strings.Split(string(data), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || pid <= 0 {
		return owner{}, errOwnerGarbled
	}
	o := owner{pid: pid}
	if len(lines) > 1 {
		o.startTime = strings.TrimSpace(lines[1])
	}
	return o, nil
}

// alive reports whether the owning process still runs.
func (o owner) alive() bool {
	if o.pid <= 0 || !processAlive(o.pid) {
		return false
	}
	if o.startTime == "" {
		return true
	}
	// A different start time means the pid now belongs to someone else.
	current := processStartTime(o.pid)
	return current == "" || current == o.startTime
}

// postmasterPID returns the pid of the postmaster running on dataDir, read
// from its postmaster.pid, if that process is alive and is indeed that
// postmaster.
func postmasterPID(dataDir string) (int, bool) {
	data, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	first, _, _ := strings.Cut(string(data), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 || !processAlive(pid) {
		return 0, false
	}
	return pid, isPostmasterOf(pid, dataDir)
}

// waitGone waits until pid has exited, at most timeout.
func waitGone(pid int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for processAlive(pid) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
}

// removeDir removes dir and everything in it, retrying briefly: backends of a
// killed postmaster may still be writing there for a moment.
func removeDir(dir string) error {
	var err error
	for range 20 {
		if err = os.RemoveAll(dir); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// childCredential returns the credential initdb and postgres must run with:
// nil (this process's own) normally, the postgres system user's when running
// as root.
func childCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(systemUser)
	if err != nil {
		return nil, fmt.Errorf("postgresql refuses to run as root and there is no %q system user to run it as "+
			"(create one with `useradd -r %s`, or run as a normal user): %w", systemUser, systemUser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("error parsing uid of user %s: %w", systemUser, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("error parsing gid of user %s: %w", systemUser, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// ChildProcAttr returns the process attributes a server started beside a
// cluster must run with, for tests that run another server that refuses root
// the way PostgreSQL does (PgBouncer): the `postgres` system user when this
// process is root, its own user otherwise, killed by the kernel when this
// process dies. The caller must hand the files the child reads to that user
// (the attributes' Credential, nil when not root) and must not start the child from a goroutine locked to
// its thread (see sysProcAttr).
func ChildProcAttr() (*syscall.SysProcAttr, error) {
	cred, err := childCredential()
	if err != nil {
		return nil, err
	}
	return sysProcAttr(cred), nil
}

// childEnv returns the environment for initdb and postgres: ours, without the
// libpq and server variables that could redirect them elsewhere.
func childEnv() []string {
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago,
// picked at random below the kernel's ephemeral port range (between
// freePortMin and freePortMax), where no outgoing connection can take it.
func FreePort() (int, error) {
	var lastErr error
	for range 100 {
		port := freePortMin + rand.IntN(freePortMax-freePortMin+1)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			lastErr = err
			continue
		}
		if err := l.Close(); err != nil {
			return 0, fmt.Errorf("error picking a free port: %w", err)
		}
		return port, nil
	}
	return 0, fmt.Errorf("error picking a free port: none of 100 tried between %d and %d was free: %w", freePortMin, freePortMax, lastErr)
}

// logTail returns the end of the server log at path.
func logTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(server log unavailable: %v)", err)
	}
	defer f.Close()
	if info, err := f.Stat(); err == nil && info.Size() > logTailBytes {
		_, _ = f.Seek(-logTailBytes, io.SeekEnd)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(error reading server log: %v)", err)
	}
	return strings.TrimSpace(string(data))
}

// findBinDir locates the directory holding initdb and postgres.
func findBinDir() (string, error) {
	if initdb, err := exec.LookPath("initdb"); err == nil {
		if dir := filepath.Dir(initdb); hasServerBinaries(dir) {
			return dir, nil
		}
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); dir != "" && hasServerBinaries(dir) {
			return dir, nil
		}
	}
	candidates, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// Newest major version first: "9.6" < "10" < "17".
	sort.Slice(candidates, func(i, j int) bool {
		return versionKey(candidates[i]) > versionKey(candidates[j])
	})
	for _, dir := range candidates {
		if hasServerBinaries(dir) {
			return dir, nil
		}
	}
	return "", ErrBinariesNotFound
}

// versionKey orders /usr/lib/postgresql/<version>/bin paths by version.
func versionKey(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

// hasServerBinaries reports whether dir holds executable initdb and postgres.
func hasServerBinaries(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

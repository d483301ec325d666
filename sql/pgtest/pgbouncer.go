package pgtest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/sql/pglocal"
)

// EnvRequirePgBouncer names the variable that turns a missing PgBouncer from
// a skipped test into a failed one (CI sets it to 1).
const EnvRequirePgBouncer = "BUILDRISK_REQUIRE_PGBOUNCER"

// PgBouncerBinary is where Debian's pgbouncer package installs the server.
const PgBouncerBinary = "/usr/sbin/pgbouncer"

// pgBouncerStartTimeout bounds waiting for a started PgBouncer to accept a
// connection.
const pgBouncerStartTimeout = 15 * time.Second

// PgBouncerOpts configures StartPgBouncer; nil is the defaults.
type PgBouncerOpts struct {
	// PoolSize is PgBouncer's default_pool_size: server connections per
	// database and user. Default 20.
	PoolSize int
	// IgnoreStartupParameters is PgBouncer's ignore_startup_parameters.
	// Default none: a client sending a startup parameter PgBouncer does not
	// track (statement_timeout, lock_timeout) is refused, as in production.
	IgnoreStartupParameters []string
}

// PgBouncer is a private PgBouncer a test started (StartPgBouncer).
type PgBouncer struct {
	// Dir holds its configuration, user list and log.
	Dir string
	// Port is the TCP port it listens on, on 127.0.0.1.
	Port int
	cmd  *exec.Cmd
	// exited is closed once the process has exited and been reaped.
	exited chan struct{}
}

// LogTail returns the end of PgBouncer's log, for a failing test's report.
func (b *PgBouncer) LogTail() string {
	data, err := os.ReadFile(filepath.Join(b.Dir, "pgbouncer.log"))
	if err != nil {
		return fmt.Sprintf("(pgbouncer log unavailable: %v)", err)
	}
	if len(data) > 8<<10 {
		data = data[len(data)-8<<10:]
	}
	return string(data)
}

// URL returns databaseURL with its host and port replaced by PgBouncer's:
// the same database, user and password, through the pooler.
func (b *PgBouncer) URL(t testing.TB, databaseURL string) string {
	t.Helper()
	u, err := url.Parse(databaseURL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	u.Host = "127.0.0.1:" + strconv.Itoa(b.Port)
	return u.String()
}

// StartPgBouncer starts a private PgBouncer (Debian's /usr/sbin/pgbouncer)
// in transaction pooling mode in front of the server of databaseURLs (every
// URL must name the same server), on a free loopback port, with its own
// configuration and user list in a temporary directory. Every database of
// that server is reachable through it, as each URL's user (its password, if
// any, is what PgBouncer logs in to the server with). It stops at the end of
// the test, before the test's databases are dropped.
//
// PgBouncer refuses to run as root: as root it runs as the `postgres` system
// user, like the local cluster. When it is not installed the test is
// skipped, or failed when BUILDRISK_REQUIRE_PGBOUNCER=1.
func StartPgBouncer(t testing.TB, opts *PgBouncerOpts, databaseURLs ...string) *PgBouncer {
	t.Helper()
	if opts == nil {
		opts = &PgBouncerOpts{}
	}
	if _, err := os.Stat(PgBouncerBinary); err != nil {
		msg := fmt.Sprintf("pgtest: PgBouncer is not installed (%s: %v); install it with `apt-get install pgbouncer`", PgBouncerBinary, err)
		if os.Getenv(EnvRequirePgBouncer) == "1" {
			t.Fatalf("%s (%s=1 requires it)", msg, EnvRequirePgBouncer)
		}
		t.Skip(msg)
	}
	if len(databaseURLs) == 0 {
		t.Fatal("pgtest: StartPgBouncer needs at least one database URL")
	}
	// The free port is picked before PgBouncer binds it: another process
	// may take it in between, so a failed start is tried again.
	var b *PgBouncer
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if b, err = startPgBouncer(opts, databaseURLs); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		_ = b.cmd.Process.Signal(syscall.SIGINT) // immediate shutdown
		select {
		case <-b.exited:
		case <-time.After(5 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.exited
		}
		if t.Failed() {
			t.Logf("pgbouncer log:\n%s", b.LogTail())
		}
		_ = os.RemoveAll(b.Dir)
	})
	return b
}

func startPgBouncer(opts *PgBouncerOpts, databaseURLs []string) (*PgBouncer, error) {
	attr, err := pglocal.ChildProcAttr()
	if err != nil {
		return nil, err
	}
	var host, port string
	var users strings.Builder
	for _, raw := range databaseURLs {
		cfg, err := pgx.ParseConfig(raw)
		if err != nil {
			return nil, fmt.Errorf("error parsing %s: %w", redact(raw), err)
		}
		if h, p := cfg.Host, strconv.Itoa(int(cfg.Port)); host == "" {
			host, port = h, p
		} else if h != host || p != port {
			return nil, errors.New("StartPgBouncer: every URL must name the same server")
		}
		fmt.Fprintf(&users, "%q %q\n", cfg.User, cfg.Password)
	}
	dir, err := os.MkdirTemp("", "pgtest-pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("error creating pgbouncer directory: %w", err)
	}
	listen, err := pglocal.FreePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	poolSize := opts.PoolSize
	if poolSize == 0 {
		poolSize = 20
	}
	// auth_type trust: PgBouncer checks only that the user is listed; the
	// listed password is what it logs in to the server with.
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = %d
max_client_conn = 500
ignore_startup_parameters = %s
logfile = %s
log_connections = 0
log_disconnections = 0
server_login_retry = 1
`, host, port, listen, filepath.Join(dir, "userlist.txt"), poolSize,
		strings.Join(opts.IgnoreStartupParameters, ","), filepath.Join(dir, "pgbouncer.log"))
	files := map[string]string{"pgbouncer.ini": ini, "userlist.txt": users.String()}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("error writing %s: %w", name, err)
		}
	}
	if cred := attr.Credential; cred != nil {
		for _, p := range []string{dir, filepath.Join(dir, "pgbouncer.ini"), filepath.Join(dir, "userlist.txt")} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				_ = os.RemoveAll(dir)
				return nil, fmt.Errorf("error handing %s to the postgres user: %w", p, err)
			}
		}
	}
	cmd := exec.Command(PgBouncerBinary, filepath.Join(dir, "pgbouncer.ini"))
	cmd.Dir = dir
	attr.Setpgid = true
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("error starting pgbouncer: %w", err)
	}
	b := &PgBouncer{Dir: dir, Port: listen, cmd: cmd, exited: make(chan struct{})}
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(b.exited) }()
	deadline := time.Now().Add(pgBouncerStartTimeout)
	for {
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(listen), time.Second)
		if err == nil {
			_ = conn.Close()
			return b, nil
		}
		select {
		case <-b.exited:
			tail := b.LogTail()
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("pgbouncer exited during start-up (%v):\n%s", waitErr, tail)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-b.exited
			tail := b.LogTail()
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("pgbouncer not accepting connections after %s:\n%s", pgBouncerStartTimeout, tail)
		}
	}
}

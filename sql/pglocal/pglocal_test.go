package pglocal

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// crashChildEnv, when set, turns the test binary into the crash helper of
// TestStaleCluster: it starts a cluster under the directory the variable
// names, reports it on stdout and blocks until it is killed.
const crashChildEnv = "PGLOCAL_TEST_CRASH_CHILD_ROOT"

// childReport is what the crash helper reports about its cluster.
type childReport struct {
	Dir  string `json:"dir"`
	Port int    `json:"port"`
	PID  int    `json:"pid"`
}

func TestMain(m *testing.M) {
	if root := os.Getenv(crashChildEnv); root != "" {
		runCrashChild(root)
		return
	}
	os.Exit(m.Run())
}

func runCrashChild(root string) {
	cluster, err := start(context.Background(), Config{}, root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	report := childReport{Dir: cluster.dir, Port: cluster.Port(), PID: cluster.cmd.Process.Pid}
	if err := json.NewEncoder(os.Stdout).Encode(report); err != nil {
		os.Exit(1)
	}
	select {} // until killed
}

func TestStart(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	cluster, err := Start(ctx, Config{Logger: testLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop() })

	require.DirExists(t, cluster.dir)
	require.Equal(t, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", cluster.Port()), cluster.URL("postgres"))

	conn, err := pgx.Connect(ctx, cluster.URL("postgres"))
	require.NoError(t, err)
	var one int
	require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one))
	require.Equal(t, 1, one)

	// The server must be ours: trusted superuser, our settings, our directory.
	var fsync, dataDir string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting('fsync'), current_setting('data_directory')").Scan(&fsync, &dataDir))
	require.Equal(t, "off", fsync)
	require.Equal(t, filepath.Join(cluster.dir, dataDirName), dataDir)

	// Stop with a connection still open: a fast shutdown ends it.
	require.NoError(t, cluster.Stop())
	require.NoError(t, cluster.Stop(), "stop must be idempotent")
	require.NoDirExists(t, cluster.dir)
	requirePortFree(t, cluster.Port())
	require.Error(t, conn.Ping(ctx))
	_ = conn.Close(ctx)
}

func TestStartConcurrentClusters(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	clusters := make(chan *Cluster, 3)
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			cluster, err := Start(ctx, Config{})
			clusters <- cluster
			errs <- err
		}()
	}
	ports := make(map[int]bool)
	for range 3 {
		cluster, err := <-clusters, <-errs
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, cluster.Stop()) })
		ports[cluster.Port()] = true
	}
	require.Len(t, ports, 3)
}

func TestStopConcurrent(t *testing.T) {
	t.Parallel()

	cluster, err := Start(context.Background(), Config{})
	require.NoError(t, err)

	// As from a signal handler and a deferred call at the same time.
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- cluster.Stop() }()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	require.NoDirExists(t, cluster.dir)
}

func TestStartFixedPort(t *testing.T) {
	t.Parallel()

	port, err := FreePort()
	require.NoError(t, err)
	cluster, err := Start(context.Background(), Config{Port: port})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cluster.Stop()) })
	require.Equal(t, port, cluster.Port())

	// A second cluster on the same port fails, quoting the server log, and
	// leaves nothing behind.
	root := testRoot(t)
	_, err = start(context.Background(), Config{Port: port}, root)
	require.ErrorContains(t, err, "server log")
	require.ErrorContains(t, err, "Address already in use")
	leftovers, _ := filepath.Glob(filepath.Join(root, dirPattern))
	require.Empty(t, leftovers)
}

func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()

		cfg, err := Config{}.withDefaults()
		require.NoError(t, err)
		require.True(t, hasServerBinaries(cfg.BinDir))
		require.Equal(t, StartTimeoutDefault, cfg.StartTimeout)
		require.NotNil(t, cfg.Logger)
	})

	t.Run("InvalidPort", func(t *testing.T) {
		t.Parallel()

		_, err := Config{Port: 70000}.withDefaults()
		require.ErrorContains(t, err, "invalid port")
	})

	t.Run("NegativeTimeout", func(t *testing.T) {
		t.Parallel()

		_, err := Config{StartTimeout: -time.Second}.withDefaults()
		require.ErrorContains(t, err, "invalid start timeout")
	})

	t.Run("BinDirWithoutBinaries", func(t *testing.T) {
		t.Parallel()

		_, err := Config{BinDir: t.TempDir()}.withDefaults()
		require.ErrorIs(t, err, ErrBinariesNotFound)
		require.ErrorContains(t, err, "apt-get install postgresql")
		require.ErrorContains(t, err, "DATABASE_URL")
	})
}

// TestStaleCluster kills a process that owns a running cluster, the way a
// crash or `kill -9` would, and shows that nothing is left in the way.
func TestStaleCluster(t *testing.T) {
	t.Parallel()

	root := testRoot(t)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), crashChildEnv+"="+root)
	child.Stderr = os.Stderr
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })

	var report childReport
	require.NoError(t, json.NewDecoder(bufio.NewReader(stdout)).Decode(&report))
	require.DirExists(t, report.Dir)
	require.True(t, processAlive(report.PID))

	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()

	// The parent-death signal takes the server down with its owner.
	require.Eventually(t, func() bool { return !processAlive(report.PID) }, 10*time.Second, 20*time.Millisecond)
	requirePortFree(t, report.Port)

	// The directory stays until the next Start sweeps it.
	require.DirExists(t, report.Dir)
	cluster, err := start(context.Background(), Config{Logger: testLogger(t)}, root)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cluster.Stop()) })
	require.NoDirExists(t, report.Dir)
	require.DirExists(t, cluster.dir, "the sweep must spare a live owner's cluster")
}

// TestSweepKillsSurvivor covers a server that outlived its owner anyway (for
// instance on a platform without a parent-death signal): the sweep kills it.
func TestSweepKillsSurvivor(t *testing.T) {
	t.Parallel()

	root := testRoot(t)
	cluster, err := start(context.Background(), Config{}, root)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cluster.Stop()) })

	// Hand the cluster to a process that has exited.
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	ownerFile := filepath.Join(cluster.dir, ownerFileName)
	require.NoError(t, os.WriteFile(ownerFile, []byte(strconv.Itoa(dead.Process.Pid)+"\n"), 0o644))

	sweepStale(testLogger(t), root)

	require.NoDirExists(t, cluster.dir)
	select {
	case <-cluster.exited:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "sweep did not kill the postmaster")
	}
	requirePortFree(t, cluster.Port())
}

func TestSweepSparesFreshDirsWithoutOwner(t *testing.T) {
	t.Parallel()

	root := testRoot(t)
	fresh, err := os.MkdirTemp(root, dirPattern)
	require.NoError(t, err)
	freshGarbled, err := os.MkdirTemp(root, dirPattern)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(freshGarbled, ownerFileName), nil, 0o644))
	old, err := os.MkdirTemp(root, dirPattern)
	require.NoError(t, err)
	longAgo := time.Now().Add(-2 * freshDirGrace)
	require.NoError(t, os.Chtimes(old, longAgo, longAgo))

	sweepStale(testLogger(t), root)

	require.DirExists(t, fresh, "another process may still be creating it")
	require.DirExists(t, freshGarbled, "another process may still be creating it")
	require.NoDirExists(t, old)
}

func TestOwnerAlive(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	require.NoError(t, writeOwnerFile(dir))
	self, err := readOwnerFile(dir)
	require.NoError(t, err)
	require.Equal(t, os.Getpid(), self.pid)
	require.True(t, self.alive())

	// Same pid, different start time: the pid was reused, the owner is gone.
	reused := owner{pid: self.pid, startTime: "1"}
	require.False(t, reused.alive())

	require.False(t, owner{}.alive())
}

// testRoot returns a directory of the test's own to create clusters in, so
// that sweeps of concurrent tests (and test binaries) never see them. It is
// traversable by the postgres user, which runs the servers when we are root.
func testRoot(t *testing.T) string {
	t.Helper()

	root, err := os.MkdirTemp("", "pglocal-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(root, 0o755))
	t.Cleanup(func() { require.NoError(t, os.RemoveAll(root)) })
	return root
}

// requirePortFree asserts that the port on 127.0.0.1 can be listened on
// again. It retries briefly: a backend of a stopped server may hold a
// connection's socket a moment longer.
func requirePortFree(t *testing.T, port int) {
	t.Helper()

	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			require.NoError(t, l.Close())
			return
		}
		if time.Now().After(deadline) {
			require.NoError(t, err, "port %d still in use", port)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// testLogger returns a logger writing to the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// Halt cuts the database (connections refused, the open one ended) and
// keeps its data; Resume brings it back on the same port; Stop after a
// Halt still removes everything.
func TestHaltResume(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	cluster, err := Start(ctx, Config{Logger: testLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop() })

	conn, err := pgx.Connect(ctx, cluster.URL("postgres"))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (42)")
	require.NoError(t, err)

	require.NoError(t, cluster.Halt())
	require.Error(t, conn.Ping(ctx), "a halt ends open connections")
	_ = conn.Close(ctx)
	_, err = pgx.Connect(ctx, cluster.URL("postgres"))
	require.Error(t, err, "a halted cluster refuses connections")
	require.DirExists(t, cluster.dir)

	require.NoError(t, cluster.Resume(ctx))
	require.NoError(t, cluster.Resume(ctx), "resuming a running cluster does nothing")
	conn, err = pgx.Connect(ctx, cluster.URL("postgres"))
	require.NoError(t, err)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT n FROM kept").Scan(&n))
	require.Equal(t, 42, n)
	_ = conn.Close(ctx)

	require.NoError(t, cluster.Stop())
	require.NoDirExists(t, cluster.dir)
	requirePortFree(t, cluster.Port())
}

// FreePort picks below the ephemeral port range, where no outgoing
// connection can take a cluster's port between a halt and a resume.
func TestFreePort(t *testing.T) {
	t.Parallel()

	for range 20 {
		port, err := FreePort()
		require.NoError(t, err)
		require.GreaterOrEqual(t, port, freePortMin)
		require.LessOrEqual(t, port, freePortMax)
		require.Less(t, port, 32768)
	}
}

// Kill is a crash of the server's processes: connections break at once, the
// directory stays, and Resume brings the server back through crash recovery
// with every acknowledged commit (Replication commits synchronously).
func TestKillResume(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	cluster, err := Start(ctx, Config{Logger: testLogger(t), Replication: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cluster.Stop()) })

	conn, err := pgx.Connect(ctx, cluster.URL("postgres"))
	require.NoError(t, err)
	var syncCommit string
	require.NoError(t, conn.QueryRow(ctx, "SHOW synchronous_commit").Scan(&syncCommit))
	require.Equal(t, "on", syncCommit, "a replication primary commits synchronously")
	_, err = conn.Exec(ctx, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (7)")
	require.NoError(t, err)

	cluster.Kill()
	require.Error(t, conn.Ping(ctx), "a kill breaks open connections")
	_ = conn.Close(ctx)
	require.DirExists(t, cluster.dir)
	requirePortFree(t, cluster.Port())

	require.NoError(t, cluster.Resume(ctx))
	conn, err = pgx.Connect(ctx, cluster.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT n FROM kept").Scan(&n))
	require.Equal(t, 7, n)
}

func TestConfigWithDefaultsReplication(t *testing.T) {
	t.Parallel()

	_, err := Config{Synchronous: true}.withDefaults()
	require.ErrorContains(t, err, "Synchronous needs StandbyOf")

	_, err = Config{StandbyOf: &Cluster{}}.withDefaults()
	require.ErrorContains(t, err, "must run with Replication")

	cfg, err := Config{StandbyOf: &Cluster{cfg: Config{Replication: true}}}.withDefaults()
	require.NoError(t, err)
	require.True(t, cfg.Replication, "a standby can become a primary")
}

// A primary and its standby, asynchronous and synchronous: the standby
// streams (the primary reports it async or sync), answers reads of the
// primary's commits and refuses writes; once the primary is killed and the
// standby promoted, the standby takes writes on a new timeline with the
// same system identifier, and keeps every commit it had received. Through
// a multi-host URL with target_session_attrs=read-write, a client reaches
// whichever of the two is the primary.
func TestReplication(t *testing.T) {
	t.Parallel()

	for _, synchronous := range []bool{false, true} {
		name := map[bool]string{false: "Async", true: "Synchronous"}[synchronous]
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			ctx := context.Background()
			primary, err := Start(ctx, Config{Logger: testLogger(t), Replication: true})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, primary.Stop()) })
			standby, err := Start(ctx, Config{Logger: testLogger(t), StandbyOf: primary, Synchronous: synchronous})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, standby.Stop()) })

			multiHost := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
				primary.Port(), standby.Port())
			conn, err := pgx.Connect(ctx, multiHost)
			require.NoError(t, err)
			require.Equal(t, uint16(primary.Port()), conn.PgConn().Conn().RemoteAddr().(*net.TCPAddr).AddrPort().Port())
			var state string
			require.NoError(t, conn.QueryRow(ctx, "SELECT sync_state FROM pg_stat_replication").Scan(&state))
			require.Equal(t, map[bool]string{false: "async", true: "sync"}[synchronous], state)
			before := identity(t, conn)
			_, err = conn.Exec(ctx, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (1)")
			require.NoError(t, err)
			_ = conn.Close(ctx)

			reader, err := pgx.Connect(ctx, standby.URL("postgres"))
			require.NoError(t, err)
			var inRecovery bool
			require.NoError(t, reader.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery))
			require.True(t, inRecovery)
			requireEventually(t, "the standby to replay the primary's commit", func() bool {
				var n int
				return reader.QueryRow(ctx, "SELECT count(*) FROM kept").Scan(&n) == nil && n == 1
			})
			_, err = reader.Exec(ctx, "INSERT INTO kept VALUES (2)")
			require.ErrorContains(t, err, "read-only transaction")

			primary.Kill()
			require.DirExists(t, primary.dir)
			var promoted bool
			require.NoError(t, reader.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&promoted))
			require.True(t, promoted)
			require.NoError(t, reader.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery))
			require.False(t, inRecovery)
			_ = reader.Close(ctx)

			conn, err = pgx.Connect(ctx, multiHost)
			require.NoError(t, err, "the multi-host URL reaches the promoted standby")
			defer conn.Close(ctx)
			require.Equal(t, uint16(standby.Port()), conn.PgConn().Conn().RemoteAddr().(*net.TCPAddr).AddrPort().Port())
			_, err = conn.Exec(ctx, "INSERT INTO kept VALUES (3)")
			require.NoError(t, err)
			var kept []int32
			rows, err := conn.Query(ctx, "SELECT n FROM kept ORDER BY n")
			require.NoError(t, err)
			kept, err = pgx.CollectRows(rows, pgx.RowTo[int32])
			require.NoError(t, err)
			require.Equal(t, []int32{1, 3}, kept)

			after := identity(t, conn)
			require.Equal(t, before.system, after.system, "a promoted standby keeps the cluster's identity")
			require.Equal(t, before.timeline+1, after.timeline, "promotion starts a new timeline")
		})
	}
}

// clusterIdentity is what a failover changes and keeps.
type clusterIdentity struct {
	system   int64
	timeline int64
}

// identity reads the system identifier and the timeline WAL is written on
// of the primary conn is connected to.
func identity(t *testing.T, conn *pgx.Conn) clusterIdentity {
	t.Helper()
	var id clusterIdentity
	var walFile string
	require.NoError(t, conn.QueryRow(context.Background(),
		"SELECT system_identifier, pg_walfile_name(pg_current_wal_lsn()) FROM pg_control_system()").Scan(&id.system, &walFile))
	timeline, err := strconv.ParseInt(walFile[:8], 16, 64)
	require.NoError(t, err)
	id.timeline = timeline
	return id
}

// requireEventually polls cond every 20 ms and fails the test after ten
// seconds.
func requireEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			require.FailNow(t, "timed out waiting for "+what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

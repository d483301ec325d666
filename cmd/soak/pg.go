package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/sql/pglocal"
)

// pgServer is the soak's own PostgreSQL: a pglocal cluster, which the
// harness restarts and stops with pg_ctl to inject database faults.
//
// pglocal starts the postmaster as its child; the first pg_ctl restart
// replaces it with one pg_ctl starts. So that a plain `pg_ctl start` after a
// stop brings the same server back, the settings pglocal passes on the
// command line are also written with ALTER SYSTEM.
//
// With -replication the soak runs two of them, a primary and a standby
// streaming from it (pglocal's Config.Replication and Config.StandbyOf);
// replicates says the server is one of those, standby that it was started
// as the standby (it may have been promoted since).
type pgServer struct {
	cluster    *pglocal.Cluster
	binDir     string
	dataDir    string
	logPath    string
	cred       *syscall.Credential
	replicates bool
	standby    bool

	mu   sync.Mutex
	down bool // stopped by stopServer, not yet started again
	ctl  bool // the postmaster now running was started by pg_ctl
}

// startPG starts a server of its own, without replication.
func startPG(ctx context.Context, logger *slog.Logger) (*pgServer, error) {
	return startNode(ctx, pglocal.Config{Logger: logger})
}

// startNode starts a pglocal cluster of cfg (a plain server, a replication
// primary, or a standby of one) and configures it for pg_ctl.
func startNode(ctx context.Context, cfg pglocal.Config) (*pgServer, error) {
	cluster, err := pglocal.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s := &pgServer{cluster: cluster, replicates: cfg.Replication || cfg.StandbyOf != nil, standby: cfg.StandbyOf != nil}
	if err := s.configure(ctx); err != nil {
		_ = cluster.Stop()
		return nil, err
	}
	return s, nil
}

func (s *pgServer) configure(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.cluster.URL("postgres"))
	if err != nil {
		return fmt.Errorf("error connecting to the soak's postgres: %w", err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&s.dataDir); err != nil {
		return err
	}
	if err := conn.QueryRow(ctx, "SELECT setting FROM pg_config WHERE name = 'BINDIR'").Scan(&s.binDir); err != nil {
		return err
	}
	settings := []string{
		"port = " + strconv.Itoa(s.cluster.Port()),
		"listen_addresses = '127.0.0.1'",
		// The cluster directory, where pglocal puts the socket (an empty
		// setting does not turn sockets off here).
		"unix_socket_directories = '" + filepath.Dir(s.dataDir) + "'",
		// Fast, yet a crash of the server's processes (pg-kill9) loses
		// nothing committed: without fsync the WAL still reaches the
		// kernel at each commit, which a process crash does not undo; an
		// asynchronous commit would lose the last ones still in the
		// server's memory.
		"fsync = off", "synchronous_commit = on", "full_page_writes = off",
		"max_connections = 300", "shared_buffers = '32MB'",
	}
	if s.replicates {
		// What pglocal puts on a replicating server's command line, so a
		// `pg_ctl start` runs it the same. max_connections stays at
		// pglocal's 200: a standby refuses to replay a primary's WAL once
		// the primary allows more connections than it does.
		settings = append(settings[:len(settings)-2], "max_connections = 200", "shared_buffers = '32MB'",
			"wal_level = replica", "max_wal_senders = 10", "wal_keep_size = '256MB'", "hot_standby = on",
			"wal_retrieve_retry_interval = '1s'")
	}
	// ALTER SYSTEM writes the server's own postgresql.auto.conf, on a
	// standby too (whose copy came from its primary by pg_basebackup, with
	// the primary's port and socket directory in it).
	for _, set := range settings {
		if _, err := conn.Exec(ctx, "ALTER SYSTEM SET "+set); err != nil {
			return fmt.Errorf("error setting %s: %w", set, err)
		}
	}
	// Every session commits synchronously, whichever postmaster runs (the
	// first one has pglocal's asynchronous commit on its command line,
	// which a role setting overrides). A standby has the primary's role
	// settings, and could not write them.
	if !s.standby {
		if _, err := conn.Exec(ctx, "ALTER ROLE ALL SET synchronous_commit = on"); err != nil {
			return fmt.Errorf("error setting synchronous_commit: %w", err)
		}
	}
	s.logPath = filepath.Join(s.dataDir, "soak-pg_ctl.log")
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("pg_ctl must run as the postgres user: %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
	}
	return nil
}

// URL returns the URL of database on the server.
func (s *pgServer) URL(database string) string { return s.cluster.URL(database) }

// pgctl runs pg_ctl on the data directory.
func (s *pgServer) pgctl(args ...string) error {
	cmd := exec.Command(filepath.Join(s.binDir, "pg_ctl"), append([]string{"-D", s.dataDir}, args...)...)
	cmd.Env = cleanEnv()
	cmd.Dir = s.dataDir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %v: %w: %s", args, err, out)
	}
	return nil
}

// restart is a fast restart: sessions are closed, the server is back when it
// returns.
func (s *pgServer) restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctl = true
	return s.pgctl("restart", "-m", "fast", "-w", "-t", "60", "-l", s.logPath)
}

// stopServer takes the server down (fast shutdown) until startServer.
func (s *pgServer) stopServer() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = true
	return s.pgctl("stop", "-m", "fast", "-w", "-t", "60")
}

// startServer brings a stopped server back.
func (s *pgServer) startServer() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.down {
		return nil
	}
	s.ctl = true
	if err := s.pgctl("start", "-w", "-t", "60", "-l", s.logPath); err != nil {
		return err
	}
	s.down = false
	return nil
}

// kill9 is a crash of the whole server: SIGKILL of the postmaster and of
// every process it started, all at once, with no shutdown of any kind. The
// server is down until startServer, which then runs crash recovery.
func (s *pgServer) kill9() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	pidFile := filepath.Join(s.dataDir, "postmaster.pid")
	pid, err := readPostmasterPID(pidFile)
	if err != nil {
		return err
	}
	victims := append([]int{pid}, childrenOf(pid)...)
	for _, p := range victims {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	s.down = true
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range victims {
		for alive(p) {
			if time.Now().After(deadline) {
				return fmt.Errorf("postgres process %d still runs 30 s after SIGKILL", p)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Every process of the cluster is gone, but one not reaped yet (a
	// zombie) still passes the postmaster's own check of its lock files
	// (the data directory's and the socket's): the crash leaves them, and
	// the next start would refuse to run.
	locks, _ := filepath.Glob(filepath.Join(filepath.Dir(s.dataDir), ".s.PGSQL.*.lock"))
	for _, lock := range append(locks, pidFile) {
		if err := os.Remove(lock); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("error removing the crashed server's lock file: %w", err)
		}
	}
	return nil
}

// killImmediate crashes the server the way a failover test does: an
// immediate shutdown (pg_ctl stop -m immediate), every server process
// exiting at once without a checkpoint, WAL not yet sent to a standby
// never reaching it. The server is down until startServer.
func (s *pgServer) killImmediate() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = true
	return s.pgctl("stop", "-m", "immediate", "-w", "-t", "60")
}

// promote promotes the standby (pg_promote, as `pg_ctl promote` does) and
// returns once it accepts writes.
func (s *pgServer) promote(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("error connecting to the standby on port %d: %w", s.cluster.Port(), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var promoted bool
	if err := conn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&promoted); err != nil {
		return fmt.Errorf("error promoting the standby on port %d: %w", s.cluster.Port(), err)
	}
	var inRecovery bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
		return fmt.Errorf("error reading the recovery state of port %d: %w", s.cluster.Port(), err)
	}
	if !promoted || inRecovery {
		return fmt.Errorf("the standby on port %d was not promoted within a minute", s.cluster.Port())
	}
	return nil
}

// readPostmasterPID reads the postmaster's pid from its lock file.
func readPostmasterPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("error reading the postmaster's lock file: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("the postmaster's lock file %s has no pid: %q", path, line)
	}
	return pid, nil
}

// childrenOf lists the processes whose parent is pid (from /proc).
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, ok := procStat(child); ok && ppid == pid {
			out = append(out, child)
		}
	}
	return out
}

// procStat returns a process's parent and state from /proc/PID/stat.
func procStat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, false
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(fields[1])
	return ppid, fields[0][0], err == nil
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	_, state, ok := procStat(pid)
	return ok && state != 'Z' && state != 'X'
}

// close stops the server and removes the cluster.
func (s *pgServer) close() error {
	s.mu.Lock()
	if s.ctl && !s.down {
		_ = s.pgctl("stop", "-m", "immediate", "-w", "-t", "30")
	}
	s.mu.Unlock()
	return s.cluster.Stop()
}

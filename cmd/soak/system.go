package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/buildrisk/radar/sql/pglocal"
)

//go:embed audit.sql
var auditSQL string

// Lines the harness waits for in radar's output.
var (
	reAPIListening = regexp.MustCompile(`api listening`)
	reWorkerUp     = regexp.MustCompile(`worker running.*worker_id=(\S+)`)
	reFakeUp       = regexp.MustCompile(`listening on (\S+)`)
)

// operatorToken is the api token of the run (loopback only).
const operatorToken = "soak-operator-0123456789abcdef0123"

// system is the system under test: PostgreSQL, the fake upstream behind the
// recording proxy, one api and the worker slots, all on loopback.
type system struct {
	cfg    *config
	logger *slog.Logger
	ev     *Evidence

	// pg is the server that accepts writes (the primary; guarded by mu,
	// read through primary()), standby the server streaming from it with
	// -replication (nil without, or while a failover clones a new one).
	pg      *pgServer
	standby *pgServer
	// pgAddrs are the servers' host:port, primary first: fixed for the
	// run, a new standby taking the dead primary's port.
	pgAddrs []string
	dbURL   string
	db      *pgxpool.Pool // the harness's own connections (application_name soak-harness)

	fake     *proc
	admin    *fakeAdmin
	proxy    *http.Server
	recorder *recordingProxy
	proxyURL string

	api       *proc
	apiURL    string
	apiPGLink pgLink
	http      *http.Client

	mu         sync.Mutex
	workers    []*workerSlot
	shortPages bool

	// disk holds the tables for the disk-full fault; nil (diskErr says
	// why) where no tmpfs could be mounted.
	disk    *smallDisk
	diskErr error
}

// workerSlot is one of the worker processes; a killed worker is restarted in
// its slot as the next generation.
type workerSlot struct {
	index     int
	gen       int
	proc      *proc
	record    *ProcessRecord
	adminAddr string
	// pgLink is the slot's way to PostgreSQL, which the pg-partition
	// fault silences; every generation of the slot connects through it.
	pgLink pgLink
}

// pgLink is one process's way to PostgreSQL: a blackhole proxy in front of
// each server (the primary's and the standby's with -replication), which
// the pg-partition fault silences together.
type pgLink []*blackhole

// newPGLink starts a proxy in front of each address.
func newPGLink(addrs []string) (pgLink, error) {
	var l pgLink
	for _, addr := range addrs {
		b, err := newBlackhole(addr)
		if err != nil {
			l.close()
			return nil, err
		}
		l = append(l, b)
	}
	return l, nil
}

func (l pgLink) partition() {
	for _, b := range l {
		b.partition()
	}
}

func (l pgLink) heal() {
	for _, b := range l {
		b.heal()
	}
}

func (l pgLink) close() {
	for _, b := range l {
		b.close()
	}
}

// addrs are the proxies' host:port, in the servers' order.
func (l pgLink) addrs() []string {
	out := make([]string, len(l))
	for i, b := range l {
		out[i] = b.Addr()
	}
	return out
}

func (s *system) baseEnv() map[string]string {
	env := map[string]string{
		"DATABASE_URL":                     s.dbURL,
		"BUILDRISK_LOG_FORMAT":             "text",
		"BUILDRISK_UPSTREAM_URL":           s.proxyURL,
		"BUILDRISK_INSECURE_HTTP_UPSTREAM": "1",
		"BUILDRISK_KEY_MOLIT":              "soak-molit",
		"BUILDRISK_KEY_DART":               "soak-dart",
		"BUILDRISK_KEY_KRX":                "soak-krx",
		"BUILDRISK_KEY_CREDIT":             "soak-credit",
		"BUILDRISK_HEARTBEAT_INTERVAL":     s.cfg.heartbeat.String(),
		"BUILDRISK_STALE_AFTER":            s.cfg.staleAfter.String(),
		"BUILDRISK_REAP_INTERVAL":          s.cfg.reapInterval.String(),
		"BUILDRISK_DRAIN_TIMEOUT":          s.cfg.drainTimeout.String(),
		"BUILDRISK_API_TOKENS":             "operator:" + operatorToken,
		// The harness is one token polling hard: its load is the point,
		// not a flood to refuse.
		"BUILDRISK_TOKEN_RATE_LIMIT": "0",
	}
	for _, job := range allJobs {
		env["BUILDRISK_SCHEDULE_"+strings.ToUpper(job)] = "off"
	}
	if s.cfg.stopTimeout > 0 {
		env["BUILDRISK_STOP_TIMEOUT"] = s.cfg.stopTimeout.String()
	}
	for k, v := range s.cfg.env {
		env[k] = v
	}
	return env
}

// dbURLVia is the database URL through the process's blackhole proxies:
// the api and the workers reach PostgreSQL only that way, the harness, the
// migration and the import directly.
func (s *system) dbURLVia(l pgLink) string {
	return databaseURL(l.addrs(), len(l) > 1)
}

// start brings the whole system up and seeds it.
func (s *system) start(ctx context.Context) error {
	s.http = &http.Client{Timeout: s.cfg.apiTimeout}
	if err := s.startDatabase(ctx); err != nil {
		return err
	}
	s.logger.Info("postgres up", "url", s.dbURL, "data", s.pg.dataDir, "replication", s.cfg.replication)

	migrate, err := startProc(s.cfg.dir, "migrate", s.cfg.bin, map[string]string{"DATABASE_URL": s.dbURL, "PGAPPNAME": "soak-migrate"}, nil, "migrate")
	if err != nil {
		return err
	}
	if !migrate.wait(2*time.Minute) || migrate.exitCode() != 0 {
		return fmt.Errorf("radar migrate failed (exit %d); see %s", migrate.exitCode(), filepath.Join(s.cfg.dir, "migrate.log"))
	}
	poolCfg, err := pgxpool.ParseConfig(s.dbURL)
	if err != nil {
		return err
	}
	poolCfg.ConnConfig.RuntimeParams["application_name"] = "soak-harness"
	poolCfg.MaxConns = 4
	if s.db, err = pgxpool.NewWithConfig(ctx, poolCfg); err != nil {
		return err
	}
	if _, err := s.db.Exec(ctx, auditSQL); err != nil {
		return fmt.Errorf("error installing the audit triggers: %w", err)
	}
	if s.cfg.replication != replicationNone {
		s.diskErr = errors.New("with -replication a standby would need a disk of its own for the tablespace")
	} else if s.disk, s.diskErr = mountSmallDisk(ctx, s); s.diskErr != nil {
		s.logger.Warn("no small disk: disk-full is not injected", "error", s.diskErr)
	}

	// The fake upstream, and the proxy the workers call it through.
	fakePort, err := pglocal.FreePort()
	if err != nil {
		return err
	}
	s.fake, err = startProc(s.cfg.dir, "fakeupstream", s.cfg.bin, nil, []*regexp.Regexp{reFakeUp},
		"fakeupstream", "--addr", "127.0.0.1:"+strconv.Itoa(fakePort), "--latency", s.cfg.upstreamLatency.String(), "--seed", strconv.FormatInt(s.cfg.seed, 10))
	if err != nil {
		return err
	}
	if _, err := s.fake.waitLine(ctx, reFakeUp, 30*time.Second); err != nil {
		return err
	}
	fakeURL := "http://127.0.0.1:" + strconv.Itoa(fakePort)
	s.admin = &fakeAdmin{base: fakeURL, client: &http.Client{Timeout: 10 * time.Second}}
	if err := s.admin.configure(map[string]any{"companies": s.cfg.companies}); err != nil {
		return err
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.proxyURL = "http://" + listener.Addr().String()
	s.recorder = &recordingProxy{target: fakeURL, ev: s.ev, client: &http.Client{Timeout: 5 * time.Minute}}
	s.proxy = &http.Server{Handler: s.recorder, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.proxy.Serve(listener) }()

	// The api.
	apiPort, err := pglocal.FreePort()
	if err != nil {
		return err
	}
	s.apiURL = "http://127.0.0.1:" + strconv.Itoa(apiPort)
	if s.apiPGLink, err = newPGLink(s.pgAddrs); err != nil {
		return err
	}
	env := s.baseEnv()
	env["DATABASE_URL"] = s.dbURLVia(s.apiPGLink)
	env["BUILDRISK_HTTP_ADDR"] = "127.0.0.1:" + strconv.Itoa(apiPort)
	env["PGAPPNAME"] = "soak-api"
	if s.api, err = startProc(s.cfg.dir, "api", s.cfg.bin, env, []*regexp.Regexp{reAPIListening}, "api"); err != nil {
		return err
	}
	if _, err := s.api.waitLine(ctx, reAPIListening, time.Minute); err != nil {
		return err
	}
	s.ev.mu.Lock()
	s.ev.APIStarted = time.Now()
	s.ev.mu.Unlock()

	for i := range s.cfg.workers {
		slot := &workerSlot{index: i + 1}
		s.workers = append(s.workers, slot)
		if err := s.startWorker(ctx, slot); err != nil {
			return err
		}
	}
	return s.seed(ctx)
}

// startWorker starts the next generation of the slot's worker and waits
// until it has registered.
func (s *system) startWorker(ctx context.Context, slot *workerSlot) error {
	port, err := pglocal.FreePort()
	if err != nil {
		return err
	}
	s.mu.Lock()
	slot.gen++
	name := fmt.Sprintf("soak-worker-%d.%d", slot.index, slot.gen)
	s.mu.Unlock()
	if slot.pgLink == nil {
		if slot.pgLink, err = newPGLink(s.pgAddrs); err != nil {
			return err
		}
	}
	env := s.baseEnv()
	env["DATABASE_URL"] = s.dbURLVia(slot.pgLink)
	slot.adminAddr = "127.0.0.1:" + strconv.Itoa(port)
	env["BUILDRISK_ADMIN_ADDR"] = slot.adminAddr
	env["PGAPPNAME"] = name
	p, err := startProc(s.cfg.dir, name, s.cfg.bin, env, []*regexp.Regexp{reWorkerUp}, "worker")
	if err != nil {
		return err
	}
	record := &ProcessRecord{AppName: name, PID: p.cmd.Process.Pid, Started: time.Now()}
	s.ev.addWorker(record)
	s.mu.Lock()
	slot.proc, slot.record = p, record
	s.mu.Unlock()
	go func() {
		<-p.exited
		s.ev.mu.Lock()
		if record.Ended.IsZero() {
			record.Ended = time.Now()
		}
		s.ev.mu.Unlock()
	}()
	// A worker started while the database is down cannot register; the
	// soak waits for it as long as an outage lasts, and some more.
	m, err := p.waitLine(ctx, reWorkerUp, s.cfg.staleAfter+2*time.Minute)
	if err != nil {
		return err
	}
	s.ev.mu.Lock()
	record.WorkerID = m[1]
	s.ev.mu.Unlock()
	return nil
}

// liveWorkers returns the slots whose worker runs.
func (s *system) liveWorkers() []*workerSlot {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*workerSlot
	for _, w := range s.workers {
		if w.proc != nil && w.proc.exitCode() == -1 {
			out = append(out, w)
		}
	}
	return out
}

// killWorker ends the slot's worker with sig and waits until it is gone
// (after a SIGTERM, at most the drain timeout and a margin, then SIGKILL).
func (s *system) killWorker(slot *workerSlot, sig syscall.Signal) (escalated bool) {
	p := slot.proc
	if sig == syscall.SIGKILL {
		s.ev.mu.Lock()
		slot.record.Killed = true
		slot.record.Ended = time.Now() // dead from now on, whenever it is reaped
		s.ev.mu.Unlock()
	}
	p.signal(sig)
	if p.wait(s.cfg.drainTimeout + 15*time.Second) {
		return false
	}
	s.ev.mu.Lock()
	slot.record.Killed = true
	slot.record.Ended = time.Now()
	s.ev.mu.Unlock()
	p.signal(syscall.SIGKILL)
	p.wait(30 * time.Second)
	return true
}

// seed loads what the jobs need: the company universe (a corpCodeSync run)
// and an exposure ledger over a random part of it.
func (s *system) seed(ctx context.Context) error {
	status, out, err := s.apiJSON(ctx, http.MethodPost, "/v1/jobs/corpCodeSync/requests", `{"params":{}}`)
	if err != nil || status != http.StatusAccepted {
		return fmt.Errorf("seeding: corpCodeSync request answered %d %v: %w", status, out, err)
	}
	id := fmt.Sprint(out["requestId"])
	deadline := time.Now().Add(3 * time.Minute)
	for {
		_, r, err := s.apiJSON(ctx, http.MethodGet, "/v1/requests/"+id, "")
		if err == nil && (r["status"] == "DONE" || r["status"] == "FAILED") {
			if r["status"] != "DONE" {
				return fmt.Errorf("seeding: corpCodeSync ended %v: %v", r["status"], r["message"])
			}
			break
		}
		if time.Now().After(deadline) {
			return errors.New("seeding: corpCodeSync did not finish within 3 minutes")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	rows, err := s.db.Query(ctx, "SELECT corp_code FROM company ORDER BY corp_code")
	if err != nil {
		return err
	}
	var codes []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return err
		}
		codes = append(codes, c)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(uint64(s.cfg.seed), 7))
	rng.Shuffle(len(codes), func(i, j int) { codes[i], codes[j] = codes[j], codes[i] })
	n := min(s.cfg.exposures, len(codes))
	var b strings.Builder
	b.WriteString("corp_code,outstanding_krw\n")
	for _, c := range codes[:n] {
		fmt.Fprintf(&b, "%s,%d\n", c, 1_000_000+rng.IntN(9_000_000_000))
	}
	file := filepath.Join(s.cfg.dir, "exposure.csv")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		return err
	}
	imp, err := startProc(s.cfg.dir, "import", s.cfg.bin, map[string]string{"DATABASE_URL": s.dbURL, "PGAPPNAME": "soak-import"}, nil, "import", "exposure", file)
	if err != nil {
		return err
	}
	if !imp.wait(time.Minute) || imp.exitCode() != 0 {
		return fmt.Errorf("radar import exposure failed (exit %d); see %s", imp.exitCode(), filepath.Join(s.cfg.dir, "import.log"))
	}
	s.logger.Info("seeded", "companies", len(codes), "exposures", n)
	return nil
}

// close shuts everything down: workers and api (SIGTERM), the fake, the
// proxy, the pool and PostgreSQL.
func (s *system) close() {
	for _, w := range s.workers {
		if w.proc != nil {
			w.proc.stop(s.cfg.drainTimeout + 10*time.Second)
		}
	}
	if s.api != nil {
		s.api.stop(20 * time.Second)
	}
	if s.fake != nil {
		s.fake.stop(10 * time.Second)
	}
	if s.proxy != nil {
		_ = s.proxy.Close()
	}
	for _, w := range s.workers {
		w.pgLink.close()
	}
	s.apiPGLink.close()
	if s.db != nil {
		s.db.Close()
	}
	// The standby first: a synchronous primary then has nothing left to
	// wait for.
	for _, pg := range []*pgServer{s.standby, s.pg} {
		if pg != nil {
			if err := pg.close(); err != nil {
				s.logger.Warn("error stopping postgres", "port", pg.cluster.Port(), "error", err)
			}
		}
	}
	if s.disk != nil {
		s.disk.unmount()
	}
}

// scrape reads a /metrics page.
func scrape(client *http.Client, url string) (Metrics, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("error parsing %s: %w", url, err)
	}
	out := Metrics{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			s := Sample{Labels: map[string]string{}}
			for _, l := range m.GetLabel() {
				s.Labels[l.GetName()] = l.GetValue()
			}
			switch {
			case m.Counter != nil:
				s.Value = m.GetCounter().GetValue()
			case m.Gauge != nil:
				s.Value = m.GetGauge().GetValue()
			case m.Untyped != nil:
				s.Value = m.GetUntyped().GetValue()
			default:
				continue
			}
			out[name] = append(out[name], s)
		}
	}
	return out, nil
}

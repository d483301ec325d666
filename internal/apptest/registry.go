package apptest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
)

// InsertRunning records an aptTrade request RUNNING on workerID with a
// STARTED execution and a heartbeat at heartbeatAt.
func (s *System) InsertRunning(workerID string, heartbeatAt time.Time) (requestID, executionID int64) {
	s.T.Helper()
	ctx := context.Background()
	_, err := s.Pool.Exec(ctx, `INSERT INTO worker (id, hostname, pid, boot, heartbeat_at, started_at)
		VALUES ($1, 'h', 1, 'b', $2, $2) ON CONFLICT (id) DO UPDATE SET heartbeat_at = $2`, workerID, heartbeatAt)
	require.NoError(s.T, err)
	require.NoError(s.T, s.Pool.QueryRow(ctx, `INSERT INTO job_request (job, params, params_hash, source, status, worker_id, claimed_at)
		VALUES ('aptTrade', '{}', 'h', 'api', 'RUNNING', $1, now()) RETURNING id`, workerID).Scan(&requestID))
	var instanceID int64
	require.NoError(s.T, s.Pool.QueryRow(ctx, `INSERT INTO job_instance (job, params, params_hash) VALUES ('aptTrade', '{}', 'h') RETURNING id`).Scan(&instanceID))
	require.NoError(s.T, s.Pool.QueryRow(ctx, `INSERT INTO job_execution (instance_id, job, request_id, status, worker_id, started_at)
		VALUES ($1, 'aptTrade', $2, 'STARTED', $3, now()) RETURNING id`, instanceID, requestID, workerID).Scan(&executionID))
	_, err = s.Pool.Exec(ctx, `UPDATE job_request SET execution_id = $1 WHERE id = $2`, executionID, requestID)
	require.NoError(s.T, err)
	return requestID, executionID
}

// CutProxy forwards TCP to PostgreSQL and can cut every connection.
type CutProxy struct {
	URL      string
	target   string
	mu       sync.Mutex
	down     bool
	conns    map[net.Conn]struct{}
	listener net.Listener
}

func NewCutProxy(t *testing.T, databaseURL string) *CutProxy {
	t.Helper()
	cfg, err := pgx.ParseConfig(databaseURL)
	require.NoError(t, err)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &CutProxy{target: fmt.Sprintf("%s:%d", cfg.Host, cfg.Port), conns: map[net.Conn]struct{}{}, listener: listener}
	p.URL = strings.Replace(databaseURL, fmt.Sprintf("%s:%d", cfg.Host, cfg.Port), listener.Addr().String(), 1)
	t.Cleanup(func() { listener.Close(); p.Cut() })
	go p.Serve()
	return p
}

func (p *CutProxy) Serve() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			client.Close()
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			client.Close()
			continue
		}
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go func() { _, _ = io.Copy(server, client); server.Close() }()
		go func() { _, _ = io.Copy(client, server); client.Close() }()
	}
}

func (p *CutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *CutProxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// CountingPool returns a pool on the test database that counts statements.
func (s *System) CountingPool(n *atomic.Int32) *pgxpool.Pool {
	s.T.Helper()
	cfg, err := pgxpool.ParseConfig(s.DBURL)
	require.NoError(s.T, err)
	cfg.ConnConfig.Tracer = CountingTracer{n}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(s.T, err)
	s.T.Cleanup(pool.Close)
	return pool
}

type CountingTracer struct{ n *atomic.Int32 }

func (c CountingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c CountingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Raw returns the body of a viewer GET as a string.
func (s *System) Raw(path string) string {
	s.T.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.API.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+ViewerToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.T, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// HeldRun is a River worker of runs that never starts them: it reports each
// River job it was handed and holds it until its context ends (River's
// cancel, or the client's stop), like a worker process that died after the
// fetch.
type HeldRun struct {
	river.WorkerDefaults[catalog.RequestArgs]
	Fetched chan int64
}

func (h *HeldRun) Work(ctx context.Context, job *river.Job[catalog.RequestArgs]) error {
	h.Fetched <- job.ID
	<-ctx.Done()
	return river.JobCancel(ctx.Err())
}

// WaitUpForStaleWindow waits until the test's database server has been up
// for a stale window. A reaper judges a heartbeat from the server's start at
// the earliest (time the database was reachable), so a stale worker the test
// inserts can only be reaped once the server has been up that long; in a
// package whose cluster just started, that is after the test began.
func (s *System) WaitUpForStaleWindow() {
	s.T.Helper()
	s.Eventually("the database to be up for a stale window", func() bool {
		return s.Count(`SELECT (now() - pg_postmaster_start_time() > make_interval(secs => $1))::int`, s.Env.StaleAfter.Seconds()) == 1
	})
}

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/api"
	"github.com/buildrisk/radar/exposure"
	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/dbpool"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/sql/migrations"
	"github.com/buildrisk/radar/sql/pglocal"
	"github.com/buildrisk/radar/upstream"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// devTokenFile is where `radar dev` writes the operator token it made, so
// the README's walk-through can read it.
const devTokenFile = ".radar/dev-token"

// devFakeUpstreamAddr is where dev serves the fake upstream by default when
// the port is free (a random port otherwise); BUILDRISK_DEV_FAKE_ADDR moves
// it (listenDevFake).
const devFakeUpstreamAddr = "127.0.0.1:8090"

// runDev runs everything in one process for a newcomer: an embedded
// PostgreSQL when DATABASE_URL is unset, migrations, the fake upstream, the
// API and a worker. Ctrl-C drains the worker and stops everything.
func runDev(ctx context.Context, stdout io.Writer) error {
	env, err := config.LoadEnv(os.Getenv)
	if err != nil {
		return err
	}
	if err := config.RefuseTxPoolingMigrations(env, "radar dev"); err != nil {
		return err
	}
	releaseAPIAddr, err := reserveDevAPIAddr(env.HTTPAddr)
	if err != nil {
		return err
	}
	defer releaseAPIAddr()
	workerID, hostname, boot := app.NewWorkerID()
	tel, err := app.NewTelemetry(ctx, env, "dev", workerID, "text")
	if err != nil {
		return err
	}
	defer tel.Shutdown()

	databaseNote := "from DATABASE_URL"
	if env.DatabaseURL == "" {
		fmt.Fprintln(stdout, "starting an embedded PostgreSQL (DATABASE_URL is unset)...")
		cluster, err := pglocal.Start(ctx, pglocal.Config{Logger: tel.Logger})
		if err != nil {
			return fmt.Errorf("error starting embedded PostgreSQL: %w", err)
		}
		defer func() {
			if err := cluster.Stop(); err != nil {
				tel.Logger.Warn("error stopping embedded PostgreSQL", slog.String("error", err.Error()))
			}
		}()
		env.DatabaseURL = cluster.URL("postgres")
		databaseNote = "embedded, deleted on exit"
	}
	// The worker's pool; the api has its own (below), each with its budget.
	pool, err := dbpool.Open(ctx, env.DatabaseURL, env.WorkerMaxConns(), env.DBTimeout, env.TxPooling, env.SessionLimits(workerID))
	if err != nil {
		return err
	}
	defer pool.Close()
	heartbeatPool, err := dbpool.OpenHeartbeat(ctx, env.DatabaseURL, config.HeartbeatPoolConns, env.DBTimeout, env.TxPooling, env.SessionLimits(workerID))
	if err != nil {
		return err
	}
	defer heartbeatPool.Close()
	if err := migrations.Migrate(ctx, pool, env.MigrateConfig(tel.Logger)); err != nil {
		return err
	}

	upstreamNote, stopFake, err := startDevUpstream(ctx, pool, env, stdout)
	if err != nil {
		return err
	}
	defer stopFake()
	for _, p := range upstream.Providers {
		if env.Keys[p] == "" {
			env.Keys[p] = "dev-" + strings.ToLower(string(p)) + "-key"
		}
	}
	operatorToken, viewerTokenNote, removeTokenFile, err := devTokens(env)
	if err != nil {
		return err
	}
	defer removeTokenFile()

	// Two roles side by side, as two processes would run them: the worker
	// and the api, which has its own pool with its statement and lock
	// timeouts, as in production (the worker's long writes are not bound by
	// them), and its own reaper.
	w, err := app.NewWorker(pool, env, tel, app.WorkerOptions{ID: workerID, Hostname: hostname, Boot: boot, HeartbeatPool: heartbeatPool})
	if err != nil {
		return err
	}
	apiPool, err := dbpool.OpenAPI(ctx, env, env.DatabaseURL)
	if err != nil {
		return err
	}
	defer apiPool.Close()
	apiRole, err := app.NewAPI(apiPool, env, tel, app.APIOptions{HTTPAddr: env.HTTPAddr})
	if err != nil {
		return err
	}
	releaseAPIAddr()
	if err := apiRole.Start(ctx); err != nil {
		return err
	}
	defer func() {
		if err := apiRole.Stop(context.WithoutCancel(ctx)); err != nil {
			tel.Logger.Warn("error stopping the api", slog.String("error", err.Error()))
		}
	}()
	if err := w.Start(ctx); err != nil {
		return err
	}
	httpAddr := apiRole.Addr()

	apiURL := "http://localhost" + portOf(httpAddr)
	fmt.Fprintf(stdout, "\nbuildrisk-radar dev is up\n")
	fmt.Fprintf(stdout, "  Console   %s/  (log in with a token below)\n", apiURL)
	fmt.Fprintf(stdout, "  API       %s\n", apiURL)
	fmt.Fprintf(stdout, "  Docs      %s/docs\n", apiURL)
	fmt.Fprintf(stdout, "  Metrics   %s/metrics\n", apiURL)
	fmt.Fprintf(stdout, "  Upstream  %s\n", upstreamNote)
	fmt.Fprintf(stdout, "  Database  %s (%s)\n", redactURL(env.DatabaseURL), databaseNote)
	fmt.Fprintf(stdout, "  Worker    %s\n", workerID)
	if operatorToken != "" {
		fmt.Fprintf(stdout, "  Token     operator %s  (also in %s)\n", operatorToken, devTokenFile)
		fmt.Fprintf(stdout, "            viewer   %s\n", viewerTokenNote)
		fmt.Fprintf(stdout, "\ntry:\n  TOKEN=$(cat %s)\n  curl -s -H \"Authorization: Bearer $TOKEN\" %s/v1/jobs\n", devTokenFile, apiURL)
	}
	fmt.Fprintf(stdout, "\nCtrl-C drains the worker and stops everything.\n\n")

	<-ctx.Done()
	fmt.Fprintln(stdout, "\nshutting down: draining the worker...")
	if err := w.Stop(context.WithoutCancel(ctx)); err != nil {
		tel.Logger.Warn("drain ended with an error", slog.String("error", err.Error()))
	}
	fmt.Fprintln(stdout, "stopped")
	return nil
}

// startDevUpstream points every provider at the fake upstream, served on
// loopback, and seeds the exposure ledger and company regions with its
// companies, unless the environment names upstream URLs. It returns what
// the banner says of the upstream and how to stop the fake.
func startDevUpstream(ctx context.Context, pool *pgxpool.Pool, env *config.Config, stdout io.Writer) (string, func(), error) {
	stop := func() {}
	if len(env.UpstreamURLs) > 0 {
		return "from the environment", stop, nil
	}
	fake := fakeupstream.New(fakeupstream.Config{Seed: 1})
	if n, err := exposure.Seed(ctx, pool, fake.Companies()); err != nil {
		return "", stop, err
	} else if n > 0 {
		fmt.Fprintf(stdout, "seeded the exposure ledger with %d of the fake upstream's companies (creditEval's targets)\n", n)
	}
	if n, err := seedCompanyRegions(ctx, pool, fake.Companies()); err != nil {
		return "", stop, err
	} else if n > 0 {
		fmt.Fprintf(stdout, "seeded company_region with %d company→region pairs of the fake upstream (metrics' main regions)\n", n)
	}
	listener, err := listenDevFake(os.Getenv)
	if err != nil {
		return "", stop, err
	}
	fakeServer := &http.Server{Handler: fake, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = fakeServer.Serve(listener) }()
	base := "http://" + listener.Addr().String()
	env.InsecureHTTPUpstream = true // dev's own fake upstream, on loopback
	for _, p := range upstream.Providers {
		env.UpstreamURLs[p] = base
	}
	removeURLFile := writeDevFile(devFakeURLFile, base)
	return "fake; stats at " + base + "/__fake/stats  (address in " + devFakeURLFile + ")", func() { _ = fakeServer.Close(); removeURLFile() }, nil
}

// devTokens makes an operator and a viewer token when the environment
// gives none (and auth is on), and writes the operator's to devTokenFile.
// It returns the operator token ("" when the environment's are used), what
// the banner says of the viewer's, and how to remove the file.
func devTokens(env *config.Config) (operatorToken, viewerTokenNote string, remove func(), err error) {
	remove = func() {}
	if env.TokensSet || env.InsecureNoAuth {
		return "", "", remove, nil
	}
	if operatorToken, err = randomToken(); err != nil {
		return "", "", remove, err
	}
	viewerToken, err := randomToken()
	if err != nil {
		return "", "", remove, err
	}
	env.Tokens = map[string]api.Role{operatorToken: api.RoleOperator, viewerToken: api.RoleViewer}
	env.TokenNames = map[string]string{operatorToken: "dev-operator", viewerToken: "dev-viewer"}
	if err := os.MkdirAll(filepath.Dir(devTokenFile), 0o700); err == nil {
		_ = os.WriteFile(devTokenFile, []byte(operatorToken+"\n"), 0o600)
	}
	return operatorToken, viewerToken, func() { _ = os.Remove(devTokenFile) }, nil
}

func randomToken() (string, error) {
	buf := make([]byte, 16)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("error making a token: %w", err)
	}
	return hex.EncodeToString(buf), nil
}

func portOf(addr string) string {
	if i := strings.LastIndex(addr, ":"); i >= 0 {
		return addr[i:]
	}
	return addr
}

func redactURL(url string) string {
	if at := strings.Index(url, "@"); at >= 0 {
		if scheme := strings.Index(url, "://"); scheme >= 0 && scheme < at {
			user := url[scheme+3 : at]
			if colon := strings.Index(user, ":"); colon >= 0 {
				return url[:scheme+3] + user[:colon] + ":***" + url[at:]
			}
		}
	}
	return url
}

// seedCompanyRegions gives metrics the fake upstream's main regions of every
// construction company (company_region; corpCodeSync leaves it alone). Pairs
// already there are kept; it returns how many it added.
func seedCompanyRegions(ctx context.Context, pool *pgxpool.Pool, companies []fakeupstream.Company) (int, error) {
	p := &queries.CompanyRegionInsertParams{}
	for _, c := range companies {
		if !c.Construction {
			continue
		}
		for _, r := range c.MainRegions {
			p.CorpCodes = append(p.CorpCodes, c.CorpCode)
			p.Regions = append(p.Regions, r)
		}
	}
	n, err := queries.New().CompanyRegionInsert(ctx, pool, p)
	if err != nil {
		return 0, fmt.Errorf("error seeding company regions: %w", err)
	}
	return int(n), nil
}

// Command radar is buildrisk-radar's one binary: it parses flags and the
// environment and runs a role. The api and worker roles are internal/app's
// (RunAPI, RunWorker); dev, migrate, run, import and fakeupstream have a
// file each here; this file only dispatches. main is the only caller of os.Exit.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/internal/config"
)

// Exit codes of radar (the CLI contract).
const (
	exitOK        = 0
	exitFailed    = 1
	exitUsage     = 2
	exitStopped   = 3
	exitDuplicate = 4
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `usage: radar COMMAND [ARGS]

commands:
  dev                       everything in one process (embedded PostgreSQL when DATABASE_URL is unset)
  api                       the HTTP API (enqueues, never runs jobs)
  worker                    claims and runs job requests
  migrate                   applies River's and the application's migrations (idempotent)
  run JOB [-p k=v ...] [--params JSON] [--max-calls N] [--confirm-purge]
                            runs one job in the foreground (exit 0 COMPLETED, 3 STOPPED, 1 FAILED, 4 duplicate, 2 usage)
  import exposure FILE.csv  loads the exposure ledger (corp_code,outstanding_krw)
  fakeupstream [--addr :8090] [--latency 0s] [--error-rate 0] [--seed 1]
                            serves every provider endpoint with deterministic data
  version                   prints the version

With no command, BUILDRISK_ROLE (api|worker|cli) selects the role.
`

// commandUsage is each command's own help, printed by `radar COMMAND
// --help` (or -h, or help) before anything starts.
var commandUsage = map[string]string{
	"dev": `usage: radar dev
Runs everything in one process: migrations, the fake upstream, the api and a
worker. Without DATABASE_URL it starts a private PostgreSQL in a temporary
directory and removes it on exit. Prints the URLs and an operator token
(also written to .radar/dev-token). Ctrl-C drains the worker and stops.
Reads the same environment as api and worker (docs/configuration.md).
`,
	"api": `usage: radar api
Serves the HTTP API on BUILDRISK_HTTP_ADDR (:8080): validates and enqueues
requests, reports on them; never runs a job. Needs DATABASE_URL and
BUILDRISK_API_TOKENS (or BUILDRISK_API_TOKENS_FILE, or
BUILDRISK_INSECURE_NO_AUTH=1). Every variable: docs/configuration.md.
`,
	"worker": `usage: radar worker
Claims and runs job requests; heartbeats, reaps dead workers, runs the
schedules. Serves /healthz, /readyz and /metrics on BUILDRISK_ADMIN_ADDR
(:9090). Needs DATABASE_URL; provider keys in BUILDRISK_KEY_<P>. Every
variable: docs/configuration.md.
`,
	"migrate": `usage: radar migrate
Applies River's and the application's migrations to DATABASE_URL; running it
twice is a no-op. Waits at most BUILDRISK_MIGRATE_LOCK_TIMEOUT for a lock per
attempt and retries for BUILDRISK_MIGRATE_LOCK_RETRY_FOR.
`,
	"run": `usage: radar run JOB [-p key=value ...] [--params JSON] [--max-calls N] [--confirm-purge]
Runs one job in the foreground under the same rules as a worker (dedupe,
advisory lock, checkpoints, caps, drain on Ctrl-C). Exit 0 COMPLETED,
3 STOPPED, 1 FAILED, 4 duplicate active request, 2 usage or invalid params.
`,
	"import": `usage: radar import exposure FILE.csv
Loads the exposure ledger: header corp_code,outstanding_krw (8-digit DART
corp code, integer >= 0). Bad lines are reported with their line numbers,
good ones loaded. Exit 0 all good, 1 some bad, 2 usage.
`,
	"fakeupstream": `usage: radar fakeupstream [--addr :8090] [--latency 0s] [--error-rate 0] [--seed 1]
Serves every provider endpoint with deterministic data. GET /__fake/stats,
POST /__fake/config, POST /__fake/reset.
`,
	"version": "usage: radar version\nPrints the version.\n",
}

// asksForHelp reports whether a command's arguments ask for its help.
func asksForHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help", "help":
			return true
		case "--":
			return false
		}
	}
	return false
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	app.Version = version
	if len(args) == 0 {
		switch role := os.Getenv("BUILDRISK_ROLE"); role {
		case "api", "worker":
			args = []string{role}
		case "cli":
			args = []string{"run"}
		case "":
			fmt.Fprint(stderr, usage)
			return exitUsage
		default:
			fmt.Fprintf(stderr, "BUILDRISK_ROLE: unknown role %q (api, worker or cli)\n", role)
			return exitUsage
		}
	}
	command, rest := args[0], args[1:]
	if text, ok := commandUsage[command]; ok && asksForHelp(rest) {
		// Help starts nothing: no database, no listener, no directory.
		fmt.Fprint(stdout, text)
		return exitOK
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var err error
	switch command {
	case "dev":
		err = runDev(ctx, stdout)
	case "api":
		err = withEnv(ctx, app.RunAPI)
	case "worker":
		err = withEnv(ctx, app.RunWorker)
	case "migrate":
		err = runMigrate(ctx, stdout, stderr)
	case "run":
		return runRun(ctx, rest, stdout, stderr)
	case "import":
		return runImport(ctx, rest, stdout, stderr)
	case "fakeupstream":
		err = runFakeUpstream(ctx, rest, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "unknown command %q\n\n%s", command, usage)
		return exitUsage
	}
	if err != nil {
		fmt.Fprintf(stderr, "radar %s: %v\n", command, err)
		if config.IsUsage(err) {
			return exitUsage
		}
		return exitFailed
	}
	return exitOK
}

// withEnv loads the configuration from the environment and runs role on it.
func withEnv(ctx context.Context, role func(context.Context, *config.Config) error) error {
	env, err := config.LoadEnv(os.Getenv)
	if err != nil {
		return err
	}
	return role(ctx, env)
}

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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	command, rest := args[0], args[1:]
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
		if app.IsUsage(err) {
			return exitUsage
		}
		return exitFailed
	}
	return exitOK
}

// withEnv loads the configuration from the environment and runs role on it.
func withEnv(ctx context.Context, role func(context.Context, *app.Config) error) error {
	env, err := app.LoadEnv(os.Getenv)
	if err != nil {
		return err
	}
	return role(ctx, env)
}

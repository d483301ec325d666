package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/exposure"
	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/dbpool"
)

const importUsage = `usage: radar import exposure FILE.csv

Loads the exposure ledger (creditEval's targets). FILE.csv starts with the
header corp_code,outstanding_krw; each line is an 8-digit DART corp code and
an integer amount in KRW >= 0. Bad lines are reported with their line
numbers and skipped; the good ones are upserted in one transaction.
Exit 0 all lines loaded, 1 some lines bad (the good ones loaded), 2 usage,
unreadable file or bad header.
`

// runImport runs `radar import exposure FILE.csv`: the file's header is
// checked before the database is touched.
func runImport(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 || args[0] != "exposure" {
		if len(args) > 0 && args[0] != "exposure" {
			fmt.Fprintf(stderr, "radar import: unknown ledger %q (only exposure)\n\n", args[0])
		}
		fmt.Fprint(stderr, importUsage)
		return exitUsage
	}
	path := args[1]
	ledger, closeFile, code := openExposure(path, stderr)
	if code != exitOK {
		return code
	}
	defer closeFile()
	env, err := config.LoadEnv(os.Getenv)
	if err == nil {
		err = config.RequireDatabaseURL(env)
	}
	if err != nil {
		fmt.Fprintf(stderr, "radar import exposure: %v\n", err)
		return exitUsage
	}
	pool, err := dbpool.Open(ctx, env.DatabaseURL, 2, 0, env.TxPooling, importLimits(env))
	if err == nil {
		defer pool.Close()
		err = dbpool.CheckSchema(ctx, pool)
	}
	if err != nil {
		fmt.Fprintf(stderr, "radar import exposure: %v\n", err)
		if config.IsUsage(err) {
			return exitUsage
		}
		return exitFailed
	}
	return loadExposure(ctx, pool, path, ledger, stdout, stderr)
}

// openExposure opens the ledger at path and checks its header. code is
// exitUsage when the file cannot be read or its header is wrong.
func openExposure(path string, stderr io.Writer) (*exposure.Reader, func(), int) {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(stderr, "radar import exposure: cannot read %s: %v\n", path, err)
		return nil, nil, exitUsage
	}
	ledger, err := exposure.NewReader(f)
	if err != nil {
		_ = f.Close()
		fmt.Fprintf(stderr, "radar import exposure: %s: %v\n", path, err)
		return nil, nil, exitUsage
	}
	return ledger, func() { _ = f.Close() }, exitOK
}

// loadExposure loads the ledger (exposure.Load) and reports it: the bad
// lines on stderr with their line numbers, the count on stdout.
func loadExposure(ctx context.Context, pool *pgxpool.Pool, path string, ledger *exposure.Reader, stdout, stderr io.Writer) int {
	res, err := exposure.Load(ctx, pool, ledger)
	if err != nil {
		fmt.Fprintf(stderr, "radar import exposure: error loading %s, nothing was loaded: %v\n", path, err)
		if errors.Is(err, exposure.ErrRead) {
			return exitUsage
		}
		return exitFailed
	}
	for _, b := range res.Bad {
		fmt.Fprintf(stderr, "%s:%d: %s\n", path, b.Line, b.Reason)
	}
	if len(res.Bad) > 0 {
		fmt.Fprintf(stdout, "exposure: loaded %d companies from %s; %d bad lines skipped (listed on stderr with their line numbers)\n", res.Loaded, path, len(res.Bad))
		return exitFailed
	}
	fmt.Fprintf(stdout, "exposure: loaded %d companies from %s\n", res.Loaded, path)
	return exitOK
}

// importLimits are the session limits of `radar import exposure`: those of
// every process but transaction_timeout, since one import loads a whole
// ledger in one transaction for as long as that takes.
func importLimits(env *config.Config) config.SessionLimits {
	limits := env.SessionLimits("radar import")
	limits.TransactionTimeout = 0
	return limits
}

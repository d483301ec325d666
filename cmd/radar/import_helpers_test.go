package main

import (
	"context"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"
)

// importExposure is `radar import exposure path` on pool: runImport without
// the environment, for tests that bring their own database.
func importExposure(ctx context.Context, pool *pgxpool.Pool, path string, stdout, stderr io.Writer) int {
	ledger, closeFile, code := openExposure(path, stderr)
	if code != exitOK {
		return code
	}
	defer closeFile()
	return loadExposure(ctx, pool, path, ledger, stdout, stderr)
}

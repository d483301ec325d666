package main

import (
	"context"
	"fmt"
	"io"
)

// runImport loads reference data. `radar import exposure FILE.csv` arrives
// with the creditEval job (issue 5); until then it says so.
func runImport(_ context.Context, args []string, _ io.Writer, stderr io.Writer) int {
	fmt.Fprintf(stderr, "radar import %v: the exposure ledger import is not available in this build yet\n", args)
	return exitUsage
}

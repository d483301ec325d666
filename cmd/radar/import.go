package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/jobs/upstream/fakeupstream"
	"github.com/buildrisk/radar/queries"
)

const importUsage = `usage: radar import exposure FILE.csv

Loads the exposure ledger (creditEval's targets). FILE.csv starts with the
header corp_code,outstanding_krw; each line is an 8-digit DART corp code and
an integer amount in KRW >= 0. Bad lines are reported with their line
numbers and skipped; the good ones are upserted in one transaction.
Exit 0 all lines loaded, 1 some lines bad (the good ones loaded), 2 usage,
unreadable file or bad header.
`

// exposureHeader is the header line `radar import exposure` requires.
var exposureHeader = []string{"corp_code", "outstanding_krw"}

// exposureLine is one good ledger line.
type exposureLine struct {
	line           int
	corpCode       string
	outstandingKRW int64
}

// badLine is a ledger line that was skipped, and why.
type badLine struct {
	line   int
	reason string
}

// runImport runs `radar import exposure FILE.csv`: the file is read and
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
	good, bad, code := readExposure(path, stderr)
	if code != exitOK {
		return code
	}
	env, err := loadEnv(os.Getenv)
	if err == nil {
		err = requireDatabaseURL(env)
	}
	if err != nil {
		fmt.Fprintf(stderr, "radar import exposure: %v\n", err)
		return exitUsage
	}
	pool, err := openPool(ctx, env.DatabaseURL, 2, 0)
	if err == nil {
		defer pool.Close()
		err = checkSchema(ctx, pool)
	}
	if err != nil {
		fmt.Fprintf(stderr, "radar import exposure: %v\n", err)
		if isUsage(err) {
			return exitUsage
		}
		return exitFailed
	}
	return loadExposure(ctx, pool, path, good, bad, stdout, stderr)
}

// importExposure is `radar import exposure path` on pool.
func importExposure(ctx context.Context, pool *pgxpool.Pool, path string, stdout, stderr io.Writer) int {
	good, bad, code := readExposure(path, stderr)
	if code != exitOK {
		return code
	}
	return loadExposure(ctx, pool, path, good, bad, stdout, stderr)
}

// readExposure reads and checks the ledger at path, reporting each bad line
// with its number on stderr. code is exitUsage when the file cannot be read
// or its header is wrong.
func readExposure(path string, stderr io.Writer) (good []exposureLine, bad []badLine, code int) {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(stderr, "radar import exposure: cannot read %s: %v\n", path, err)
		return nil, nil, exitUsage
	}
	defer f.Close()
	good, bad, err = parseExposure(f)
	if err != nil {
		fmt.Fprintf(stderr, "radar import exposure: %s: %v\n", path, err)
		return nil, nil, exitUsage
	}
	for _, b := range bad {
		fmt.Fprintf(stderr, "%s:%d: %s\n", path, b.line, b.reason)
	}
	return good, bad, exitOK
}

// loadExposure upserts the good lines in one transaction: either every
// good line is loaded or none is.
func loadExposure(ctx context.Context, pool *pgxpool.Pool, path string, good []exposureLine, bad []badLine, stdout, stderr io.Writer) int {
	if len(good) > 0 {
		p := &queries.ExposureUpsertParams{}
		for _, l := range good {
			p.CorpCodes = append(p.CorpCodes, l.corpCode)
			p.OutstandingKrws = append(p.OutstandingKrws, l.outstandingKRW)
		}
		err := queries.InTx(ctx, pool, func(tx pgx.Tx) error {
			n, err := queries.New().ExposureUpsert(ctx, tx, p)
			if err != nil {
				return err
			}
			if n != int64(len(good)) {
				return fmt.Errorf("upserted %d lines, expected %d", n, len(good))
			}
			return nil
		})
		if err != nil {
			fmt.Fprintf(stderr, "radar import exposure: error loading %s, nothing was loaded: %v\n", path, err)
			return exitFailed
		}
	}
	if len(bad) > 0 {
		fmt.Fprintf(stdout, "exposure: loaded %d companies from %s; %d bad lines skipped (listed on stderr with their line numbers)\n", len(good), path, len(bad))
		return exitFailed
	}
	fmt.Fprintf(stdout, "exposure: loaded %d companies from %s\n", len(good), path)
	return exitOK
}

// parseExposure reads a ledger: the header, then one company per line.
// Blank lines are ignored. A company listed twice keeps its first line; the
// repeat is a bad line (two amounts for one company is a mistake to fix,
// not to guess). Only a missing or wrong header, or a read error, is an
// error.
func parseExposure(r io.Reader) (good []exposureLine, bad []badLine, err error) {
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 64*1024), 1<<20)
	seen := map[string]int{}
	lineNo := 0
	header := false
	for scanner.Scan() {
		lineNo++
		text := strings.TrimRight(scanner.Text(), "\r")
		if lineNo == 1 {
			text = strings.TrimPrefix(text, "\ufeff") // a BOM, as spreadsheets write it
		}
		if strings.TrimSpace(text) == "" {
			continue
		}
		fields, csvErr := csv.NewReader(strings.NewReader(text)).Read()
		for i := range fields {
			fields[i] = strings.TrimSpace(fields[i])
		}
		if !header {
			if csvErr != nil || len(fields) != 2 || !strings.EqualFold(fields[0], exposureHeader[0]) || !strings.EqualFold(fields[1], exposureHeader[1]) {
				return nil, nil, fmt.Errorf("line %d: header must be %q, got %q", lineNo, strings.Join(exposureHeader, ","), text)
			}
			header = true
			continue
		}
		if csvErr != nil {
			bad = append(bad, badLine{lineNo, fmt.Sprintf("malformed CSV: %v", unwrapCSV(csvErr))})
			continue
		}
		line, reason := parseExposureLine(fields)
		if reason != "" {
			bad = append(bad, badLine{lineNo, reason})
			continue
		}
		if first, ok := seen[line.corpCode]; ok {
			bad = append(bad, badLine{lineNo, fmt.Sprintf("corp_code %s is already on line %d", line.corpCode, first)})
			continue
		}
		seen[line.corpCode] = lineNo
		line.line = lineNo
		good = append(good, line)
	}
	if err := scanner.Err(); err != nil {
		return nil, nil, fmt.Errorf("error reading line %d: %w", lineNo+1, err)
	}
	if !header {
		return nil, nil, fmt.Errorf("empty file: the header %q is missing", strings.Join(exposureHeader, ","))
	}
	return good, bad, nil
}

// parseExposureLine checks one line's fields; reason is "" when it is good.
func parseExposureLine(fields []string) (exposureLine, string) {
	if len(fields) != 2 {
		return exposureLine{}, fmt.Sprintf("%d fields, want 2 (corp_code,outstanding_krw)", len(fields))
	}
	code, amount := fields[0], fields[1]
	if len(code) != 8 || !allDigits(code) {
		return exposureLine{}, fmt.Sprintf("corp_code %q is not an 8-digit DART corp code (keep its leading zeros)", code)
	}
	if amount == "" || !allDigits(amount) {
		return exposureLine{}, fmt.Sprintf("outstanding_krw %q is not an integer >= 0", amount)
	}
	n, err := strconv.ParseInt(amount, 10, 64)
	if err != nil {
		return exposureLine{}, fmt.Sprintf("outstanding_krw %q is out of range", amount)
	}
	return exposureLine{corpCode: code, outstandingKRW: n}, ""
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// unwrapCSV drops csv.ParseError's position (always line 1 of a one-line
// reader) and keeps its reason.
func unwrapCSV(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// seedExposure fills an empty exposure ledger for `radar dev` from the fake
// upstream's companies: every construction company and every second other
// one, with amounts derived from the corp code (about 5% fully repaid, so
// not a target). It returns how many companies it loaded; 0 when the ledger
// already had rows, which it never touches.
func seedExposure(ctx context.Context, pool *pgxpool.Pool, companies []fakeupstream.Company) (int, error) {
	q := queries.New()
	n, err := q.ExposureCount(ctx, pool)
	if err != nil {
		return 0, fmt.Errorf("error reading the exposure ledger: %w", err)
	}
	if n > 0 {
		return 0, nil
	}
	p := &queries.ExposureUpsertParams{}
	for i, c := range companies {
		if !c.Construction && i%2 != 0 {
			continue
		}
		h := fnv.New64a()
		_, _ = h.Write([]byte(c.CorpCode))
		sum := h.Sum64()
		amount := int64(1+sum%5000) * 10_000_000 // 10 million to 50 billion KRW
		if sum%20 == 0 {
			amount = 0 // repaid
		}
		p.CorpCodes = append(p.CorpCodes, c.CorpCode)
		p.OutstandingKrws = append(p.OutstandingKrws, amount)
	}
	var loaded int64
	err = queries.InTx(ctx, pool, func(tx pgx.Tx) error {
		loaded, err = q.ExposureUpsert(ctx, tx, p)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("error seeding the exposure ledger: %w", err)
	}
	return int(loaded), nil
}

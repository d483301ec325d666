package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/sql/pgtx"
	"github.com/buildrisk/radar/upstream/fakeupstream"
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

// exposureBatch is how many lines are staged per COPY: the importer's
// memory is this batch, whatever the file's size.
const exposureBatch = 5000

// exposureLine is one good ledger line.
type exposureLine struct {
	corpCode       string
	outstandingKRW int64
}

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
	env, err := loadEnv(os.Getenv)
	if err == nil {
		err = requireDatabaseURL(env)
	}
	if err != nil {
		fmt.Fprintf(stderr, "radar import exposure: %v\n", err)
		return exitUsage
	}
	pool, err := openPool(ctx, env.DatabaseURL, 2, 0, env.TxPooling, importLimits(env))
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
	return loadExposure(ctx, pool, path, ledger, stdout, stderr)
}

// openExposure opens the ledger at path and checks its header. code is
// exitUsage when the file cannot be read or its header is wrong.
func openExposure(path string, stderr io.Writer) (*exposureReader, func(), int) {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(stderr, "radar import exposure: cannot read %s: %v\n", path, err)
		return nil, nil, exitUsage
	}
	ledger, err := newExposureReader(f)
	if err != nil {
		_ = f.Close()
		fmt.Fprintf(stderr, "radar import exposure: %s: %v\n", path, err)
		return nil, nil, exitUsage
	}
	return ledger, func() { _ = f.Close() }, exitOK
}

// loadExposure streams the ledger into the database in one transaction:
// batches of lines are copied into staging rows (bad lines with their
// reason), then the bad lines and repeats are reported in line order and
// the good lines upserted. Either every good line is loaded or none is;
// memory stays one batch whatever the file's size.
func loadExposure(ctx context.Context, pool *pgxpool.Pool, path string, ledger *exposureReader, stdout, stderr io.Writer) int {
	q := queries.New()
	importID := rand.Int64()
	var loaded int64
	var bad []*queries.ExposureImportBadLinesRow
	err := pgtx.InTx(ctx, pool, func(tx pgx.Tx) error {
		if err := ledger.stage(ctx, tx, importID); err != nil {
			return err
		}
		var err error
		if bad, err = q.ExposureImportBadLines(ctx, tx, importID); err != nil {
			return fmt.Errorf("error listing bad lines: %w", err)
		}
		if loaded, err = q.ExposureImportApply(ctx, tx, importID); err != nil {
			return err
		}
		if want := ledger.good - (int64(len(bad)) - ledger.bad); loaded != want { // a repeat is good but not loaded
			return fmt.Errorf("upserted %d lines, expected %d", loaded, want)
		}
		return q.ExposureImportClear(ctx, tx, importID)
	})
	if err != nil {
		fmt.Fprintf(stderr, "radar import exposure: error loading %s, nothing was loaded: %v\n", path, err)
		if errors.Is(err, errExposureRead) {
			return exitUsage
		}
		return exitFailed
	}
	for _, b := range bad {
		fmt.Fprintf(stderr, "%s:%d: %s\n", path, b.Line, b.Reason)
	}
	if len(bad) > 0 {
		fmt.Fprintf(stdout, "exposure: loaded %d companies from %s; %d bad lines skipped (listed on stderr with their line numbers)\n", loaded, path, len(bad))
		return exitFailed
	}
	fmt.Fprintf(stdout, "exposure: loaded %d companies from %s\n", loaded, path)
	return exitOK
}

// errExposureRead marks a failure to read the ledger file mid-way.
var errExposureRead = errors.New("error reading the ledger")

// exposureReader reads a ledger one line at a time: the header, then one
// company per line. Blank lines are ignored. Every line is parsed by one
// csv.Reader that sees one line at a time (a quote left open spoils its own
// line, never the ones after it).
type exposureReader struct {
	scanner *bufio.Scanner
	line    lineSource
	csv     *csv.Reader
	lineNo  int
	// good and bad count the lines staged so far.
	good, bad int64
}

// lineSource feeds the csv.Reader one line, then io.EOF, until the next
// line is set: the csv.Reader (and its buffer) is made once per file.
type lineSource struct{ rest []byte }

func (s *lineSource) Read(p []byte) (int, error) {
	if len(s.rest) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.rest)
	s.rest = s.rest[n:]
	return n, nil
}

// newExposureReader reads and checks the header. Only a missing or wrong
// header, or a read error, is an error.
func newExposureReader(r io.Reader) (*exposureReader, error) {
	er := &exposureReader{scanner: bufio.NewScanner(r)}
	er.scanner.Buffer(make([]byte, 64*1024), 1<<20)
	er.csv = csv.NewReader(&er.line)
	er.csv.FieldsPerRecord = -1
	er.csv.ReuseRecord = true
	text, ok, err := er.nextLine()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("empty file: the header %q is missing", strings.Join(exposureHeader, ","))
	}
	fields, csvErr := er.parse(text)
	if csvErr != nil || len(fields) != 2 || !strings.EqualFold(fields[0], exposureHeader[0]) || !strings.EqualFold(fields[1], exposureHeader[1]) {
		return nil, fmt.Errorf("line %d: header must be %q, got %q", er.lineNo, strings.Join(exposureHeader, ","), text)
	}
	return er, nil
}

// nextLine returns the next non-blank line without its line ending.
func (er *exposureReader) nextLine() (string, bool, error) {
	for er.scanner.Scan() {
		er.lineNo++
		text := strings.TrimRight(er.scanner.Text(), "\r")
		if er.lineNo == 1 {
			text = strings.TrimPrefix(text, "\ufeff") // a BOM, as spreadsheets write it
		}
		if strings.TrimSpace(text) != "" {
			return text, true, nil
		}
	}
	if err := er.scanner.Err(); err != nil {
		return "", false, fmt.Errorf("%w: line %d: %w", errExposureRead, er.lineNo+1, err)
	}
	return "", false, nil
}

// parse splits one line into trimmed fields.
func (er *exposureReader) parse(text string) ([]string, error) {
	er.line.rest = []byte(text)
	fields, err := er.csv.Read()
	for i := range fields {
		fields[i] = strings.TrimSpace(fields[i])
	}
	return fields, err
}

// stage copies every remaining line into the import's staging rows, a
// batch at a time; the batch's rows are reused.
func (er *exposureReader) stage(ctx context.Context, tx pgx.Tx, importID int64) error {
	q := queries.New()
	rows := make([]queries.ExposureImportStageParams, exposureBatch)
	codes := make([]string, exposureBatch)
	amounts := make([]int64, exposureBatch)
	reasons := make([]string, exposureBatch)
	batch := make([]*queries.ExposureImportStageParams, 0, exposureBatch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if _, err := q.ExposureImportStage(ctx, tx, batch); err != nil {
			return fmt.Errorf("error staging lines: %w", err)
		}
		batch = batch[:0]
		return nil
	}
	for {
		text, ok, err := er.nextLine()
		if err != nil {
			return err
		}
		if !ok {
			return flush()
		}
		i := len(batch)
		row := &rows[i]
		*row = queries.ExposureImportStageParams{ImportID: importID, Line: int32(er.lineNo)}
		fields, csvErr := er.parse(text)
		var line exposureLine
		reason := ""
		if csvErr != nil {
			reason = fmt.Sprintf("malformed CSV: %v", unwrapCSV(csvErr))
		} else {
			line, reason = parseExposureLine(fields)
		}
		if reason != "" {
			reasons[i] = reason
			row.Reason = &reasons[i]
			er.bad++
		} else {
			codes[i], amounts[i] = line.corpCode, line.outstandingKRW
			row.CorpCode, row.OutstandingKrw = &codes[i], &amounts[i]
			er.good++
		}
		batch = append(batch, row)
		if len(batch) == exposureBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
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
	err = pgtx.InTx(ctx, pool, func(tx pgx.Tx) error {
		loaded, err = q.ExposureUpsert(ctx, tx, p)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("error seeding the exposure ledger: %w", err)
	}
	return int(loaded), nil
}

// importLimits are the session limits of `radar import exposure`: those of
// every process but transaction_timeout, since one import loads a whole
// ledger in one transaction for as long as that takes.
func importLimits(env *envConfig) sessionLimits {
	limits := env.sessionLimits("radar import")
	limits.transactionTimeout = 0
	return limits
}

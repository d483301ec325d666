// Package exposure loads the exposure ledger, the companies creditEval
// evaluates and their outstanding amounts: a CSV file streamed into the
// database in one transaction (radar import exposure), or a seed derived
// from the fake upstream's companies (radar dev, tests).
package exposure

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/sql/pgtx"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// Result is what one Load did: the companies upserted and the bad lines
// (bad values and repeats), in line order.
type Result struct {
	Loaded int64
	Bad    []*queries.ExposureImportBadLinesRow
}

// Load streams the ledger into the database in one transaction: batches of
// lines are copied into staging rows (bad lines with their reason), then
// the bad lines and repeats are listed in line order and the good lines
// upserted. Either every good line is loaded or none is; memory stays one
// batch whatever the file's size. An error wrapping ErrRead is the file's.
func Load(ctx context.Context, pool *pgxpool.Pool, ledger *Reader) (Result, error) {
	q := queries.New()
	importID := rand.Int64()
	var res Result
	err := pgtx.InTx(ctx, pool, func(tx pgx.Tx) error {
		if err := ledger.Stage(ctx, tx, importID); err != nil {
			return err
		}
		var err error
		if res.Bad, err = q.ExposureImportBadLines(ctx, tx, importID); err != nil {
			return fmt.Errorf("error listing bad lines: %w", err)
		}
		if res.Loaded, err = q.ExposureImportApply(ctx, tx, importID); err != nil {
			return err
		}
		if want := ledger.good - (int64(len(res.Bad)) - ledger.bad); res.Loaded != want { // a repeat is good but not loaded
			return fmt.Errorf("upserted %d lines, expected %d", res.Loaded, want)
		}
		return q.ExposureImportClear(ctx, tx, importID)
	})
	return res, err
}

// Header is the header line `radar import exposure` requires.
var Header = []string{"corp_code", "outstanding_krw"}

// batchLines is how many lines are staged per COPY: the importer's
// memory is this batch, whatever the file's size.
const batchLines = 5000

// entry is one good ledger line.
type entry struct {
	corpCode       string
	outstandingKRW int64
}

// ErrRead marks a failure to read the ledger file mid-way.
var ErrRead = errors.New("error reading the ledger")

// Reader reads a ledger one line at a time: the header, then one
// company per line. Blank lines are ignored. Every line is parsed by one
// csv.Reader that sees one line at a time (a quote left open spoils its own
// line, never the ones after it).
type Reader struct {
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

// NewReader reads and checks the header. Only a missing or wrong
// header, or a read error, is an error.
func NewReader(r io.Reader) (*Reader, error) {
	er := &Reader{scanner: bufio.NewScanner(r)}
	er.scanner.Buffer(make([]byte, 64*1024), 1<<20)
	er.csv = csv.NewReader(&er.line)
	er.csv.FieldsPerRecord = -1
	er.csv.ReuseRecord = true
	text, ok, err := er.nextLine()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("empty file: the header %q is missing", strings.Join(Header, ","))
	}
	fields, csvErr := er.parse(text)
	if csvErr != nil || len(fields) != 2 || !strings.EqualFold(fields[0], Header[0]) || !strings.EqualFold(fields[1], Header[1]) {
		return nil, fmt.Errorf("line %d: header must be %q, got %q", er.lineNo, strings.Join(Header, ","), text)
	}
	return er, nil
}

// nextLine returns the next non-blank line without its line ending.
func (er *Reader) nextLine() (string, bool, error) {
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
		return "", false, fmt.Errorf("%w: line %d: %w", ErrRead, er.lineNo+1, err)
	}
	return "", false, nil
}

// parse splits one line into trimmed fields.
func (er *Reader) parse(text string) ([]string, error) {
	er.line.rest = []byte(text)
	fields, err := er.csv.Read()
	for i := range fields {
		fields[i] = strings.TrimSpace(fields[i])
	}
	return fields, err
}

// Stage copies every remaining line into the import's staging rows, a
// batch at a time; the batch's rows are reused.
func (er *Reader) Stage(ctx context.Context, tx pgx.Tx, importID int64) error {
	q := queries.New()
	rows := make([]queries.ExposureImportStageParams, batchLines)
	codes := make([]string, batchLines)
	amounts := make([]int64, batchLines)
	reasons := make([]string, batchLines)
	batch := make([]*queries.ExposureImportStageParams, 0, batchLines)
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
		var line entry
		reason := ""
		if csvErr != nil {
			reason = fmt.Sprintf("malformed CSV: %v", unwrapCSV(csvErr))
		} else {
			line, reason = parseLine(fields)
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
		if len(batch) == batchLines {
			if err := flush(); err != nil {
				return err
			}
		}
	}
}

// parseLine checks one line's fields; reason is "" when it is good.
func parseLine(fields []string) (entry, string) {
	if len(fields) != 2 {
		return entry{}, fmt.Sprintf("%d fields, want 2 (corp_code,outstanding_krw)", len(fields))
	}
	code, amount := fields[0], fields[1]
	if len(code) != 8 || !allDigits(code) {
		return entry{}, fmt.Sprintf("corp_code %q is not an 8-digit DART corp code (keep its leading zeros)", code)
	}
	if amount == "" || !allDigits(amount) {
		return entry{}, fmt.Sprintf("outstanding_krw %q is not an integer >= 0", amount)
	}
	n, err := strconv.ParseInt(amount, 10, 64)
	if err != nil {
		return entry{}, fmt.Sprintf("outstanding_krw %q is out of range", amount)
	}
	return entry{corpCode: code, outstandingKRW: n}, ""
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

// Seed fills an empty exposure ledger for `radar dev` from the fake
// upstream's companies: every construction company and every second other
// one, with amounts derived from the corp code (about 5% fully repaid, so
// not a target). It returns how many companies it loaded; 0 when the ledger
// already had rows, which it never touches.
func Seed(ctx context.Context, pool *pgxpool.Pool, companies []fakeupstream.Company) (int, error) {
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

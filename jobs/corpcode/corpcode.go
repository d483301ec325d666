// Package corpcode is the corpCodeSync job: it downloads DART's corp-code
// archive (a zip holding CORPCODE.xml, every company DART knows) into a
// temporary file and upserts the companies into company in chunks of
// ChunkSize, marking construction companies as tracked.
//
// Restart rule: the archive lives on a tmpfs that a new container does not
// have, so a restarted run must not assume the file is still there. Plan runs on every execution,
// resumed ones included: it reuses the instance's file while it is still
// there, unchanged, and downloads it again when it is gone. A chunk key
// embeds the file's SHA-256, so the chunks of a re-downloaded file (whose
// order may differ) never match the checkpoints of the old one and the new
// file is read from its start; a saved read position is only ever reused
// with the very bytes it was taken from.
package corpcode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/upstream"
)

// DirDefault returns the directory archives are downloaded to unless
// Job.Dir says otherwise: buildrisk-corpcode under the system's temporary
// directory (a tmpfs in the container).
func DirDefault() string { return filepath.Join(os.TempDir(), "buildrisk-corpcode") }

// Job implements batch.Job for corpCodeSync.
type Job struct {
	// Dir is where archives are downloaded; "" means DirDefault().
	Dir string
}

var _ batch.Job = (*Job)(nil)
var _ batch.DomainRowCounter = (*Job)(nil)
var _ batch.RunEnder = (*Job)(nil)

// archive is the downloaded file an instance loads.
type archive struct {
	path      string
	sha256    string
	companies int
}

// Plan implements batch.Job: make sure the instance's archive is on disk
// (downloading it, one call, when it is not), then list its chunks, keyed
// SHA256:INDEX. Targets are declared per chunk: after a re-download the
// instance also holds the old file's committed chunks, each consistent on
// its own.
func (j Job) Plan(ctx context.Context, run *batch.Run) (*batch.Plan, error) {
	a, err := j.archive(ctx, run)
	if err != nil {
		return nil, err
	}
	j.removeOtherArchives(ctx, run, a.path)
	n := (a.companies + ChunkSize - 1) / ChunkSize
	chunks := make([]string, n)
	for i := range chunks {
		chunks[i] = chunkKey(a.sha256, i)
	}
	return &batch.Plan{Chunks: chunks, Targets: batch.TargetsUnknown}, nil
}

// Process implements batch.Job: read the chunk's companies from the archive
// (the chunk's file must still be the instance's) and upsert them.
func (j Job) Process(ctx context.Context, run *batch.Run, chunk string) (*batch.ChunkResult, error) {
	sum, index, err := parseChunkKey(chunk)
	if err != nil {
		return nil, err
	}
	rec, err := queries.New().CorpCodeDownloadGet(ctx, run.DB, run.InstanceID)
	if err := queries.Interpret(err); err != nil {
		return nil, fmt.Errorf("error reading the archive record: %w", err)
	}
	if rec.Sha256 != sum {
		return nil, fmt.Errorf("chunk %s belongs to another download (the instance's archive is %s now); a new request plans again", chunk, rec.Sha256)
	}
	if _, err := os.Stat(rec.Path); err != nil {
		return nil, fmt.Errorf("the corp-code archive %s is gone (%v); a new request downloads it again", rec.Path, err)
	}

	first, end := index*ChunkSize, (index+1)*ChunkSize
	companies, err := readerFor(run, rec.Path, rec.Sha256).read(first, end)
	if err != nil {
		return nil, err
	}

	res := &batch.ChunkResult{Targets: int64(len(companies))}
	p := &queries.CompanyUpsertParams{ExecutionID: run.ExecutionID}
	seen := make(map[string]bool, len(companies))
	var invalid []string
	for _, c := range companies {
		switch {
		case !catalog.IsCorpCode(c.CorpCode):
			res.Failed++
			invalid = append(invalid, c.CorpCode)
			continue
		case seen[c.CorpCode]:
			res.Skipped++ // listed twice in one chunk: one row
			continue
		}
		seen[c.CorpCode] = true
		p.CorpCodes = append(p.CorpCodes, c.CorpCode)
		p.Names = append(p.Names, c.Name)
		p.EngNames = append(p.EngNames, c.EngName)
		p.StockCodes = append(p.StockCodes, c.StockCode)
		p.ModifyDates = append(p.ModifyDates, modifyDate(c.ModifyDate))
		p.Tracked = append(p.Tracked, Tracked(c.Name, c.EngName))
	}
	if len(invalid) > 0 {
		run.Logger.WarnContext(ctx, "corp-code entries without a valid 8-digit code counted as failed",
			slog.String("chunk", chunk), slog.Int("count", len(invalid)), slog.String("first", invalid[0]))
	}
	res.Written = int64(len(p.CorpCodes))
	if len(p.CorpCodes) > 0 {
		res.Write = func(ctx context.Context, tx pgx.Tx) error {
			n, err := queries.New().CompanyUpsert(ctx, tx, p)
			if err != nil {
				return fmt.Errorf("error upserting companies: %w", err)
			}
			if n != int64(len(p.CorpCodes)) {
				return fmt.Errorf("upserted %d companies, expected %d", n, len(p.CorpCodes))
			}
			return nil
		}
	}
	return res, nil
}

// DomainRows implements batch.DomainRowCounter.
func (Job) DomainRows(ctx context.Context, db queries.DBTX, executionIDs []int64) (int64, error) {
	return queries.New().CompanyCountByExecutions(ctx, db, executionIDs)
}

// EndRun ends the execution's parse of the archive (batch.RunEnder).
func (Job) EndRun(run *batch.Run) { releaseReader(run) }

func (j Job) dir() string {
	if j.Dir != "" {
		return j.Dir
	}
	return DirDefault()
}

// archive returns the instance's archive: the recorded file when it is still
// on disk with the recorded SHA-256, otherwise a new download.
func (j Job) archive(ctx context.Context, run *batch.Run) (*archive, error) {
	q := queries.New()
	rec, err := q.CorpCodeDownloadGet(ctx, run.DB, run.InstanceID)
	switch err := queries.Interpret(err); {
	case err == nil:
		sum, statErr := fileSHA256(rec.Path)
		if statErr == nil && sum == rec.Sha256 {
			run.Logger.InfoContext(ctx, "reusing the corp-code archive of this instance", slog.String("path", rec.Path), slog.String("sha256", sum))
			return &archive{path: rec.Path, sha256: rec.Sha256, companies: int(rec.Companies)}, nil
		}
		run.Logger.InfoContext(ctx, "the corp-code archive of this instance is gone or changed: downloading it again, read from the start",
			slog.String("path", rec.Path), slog.String("reason", describe(statErr, sum, rec.Sha256)))
		_ = os.Remove(rec.Path)
	case !errors.Is(err, queries.ErrNotFound):
		return nil, fmt.Errorf("error reading the archive record: %w", err)
	}
	return j.download(ctx, run)
}

// download fetches the archive (one call), saves it under Dir, counts its
// companies (which also checks it is an archive and not DART's refusal) and
// records it for the instance.
func (j Job) download(ctx context.Context, run *batch.Run) (*archive, error) {
	body, err := run.Calls.Get(ctx, upstream.EndpointCorpCode, upstream.CorpCodeQuery())
	if err != nil {
		return nil, err
	}
	dir := j.dir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("error creating %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, fmt.Sprintf("corpcode-%d-*.zip", run.InstanceID))
	if err != nil {
		return nil, fmt.Errorf("error creating the archive file: %w", err)
	}
	path := f.Name()
	_, err = f.Write(body)
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("error saving the archive: %w", err)
	}
	companies := 0
	if err := upstream.ReadCorpCodes(path, func(upstream.CorpCode) error { companies++; return nil }); err != nil {
		_ = os.Remove(path)
		return nil, err
	}
	sum := sha256.Sum256(body)
	a := &archive{path: path, sha256: hex.EncodeToString(sum[:]), companies: companies}
	// Recorded in a transaction fenced on the execution: a run that lost
	// its execution records no download for the instance.
	if err := run.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return queries.New().CorpCodeDownloadUpsert(ctx, tx, &queries.CorpCodeDownloadUpsertParams{
			InstanceID: run.InstanceID, Path: a.path, Sha256: a.sha256, SizeBytes: int64(len(body)), Companies: int32(companies),
		})
	}); err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("error recording the archive: %w", err)
	}
	run.Logger.InfoContext(ctx, "downloaded the corp-code archive",
		slog.String("path", path), slog.String("sha256", a.sha256), slog.Int("companies", companies), slog.Int("bytes", len(body)))
	return a, nil
}

// StaleArchiveAge is the age after which Plan deletes any archive file in
// Dir that is not the current one, whoever left it (an instance whose
// database is gone, another deployment on the host): deleting one is always
// safe, since an instance whose file is gone downloads again.
const StaleArchiveAge = 24 * time.Hour

// removeOtherArchives deletes the files of other instances: only the newest
// instance of a job can be resumed, and only one corpCodeSync runs at a
// time, so they are garbage. It also sweeps files older than
// StaleArchiveAge. Failures are logged, never fatal.
func (j Job) removeOtherArchives(ctx context.Context, run *batch.Run, current string) {
	if stale, err := filepath.Glob(filepath.Join(j.dir(), "corpcode-*.zip")); err == nil {
		for _, path := range stale {
			if info, err := os.Stat(path); err == nil && path != current && time.Since(info.ModTime()) > StaleArchiveAge {
				_ = os.Remove(path)
			}
		}
	}
	q := queries.New()
	others, err := q.CorpCodeDownloadListOthers(ctx, run.DB, run.InstanceID)
	if err != nil {
		run.Logger.WarnContext(ctx, "could not list old corp-code archives", slog.String("error", err.Error()))
		return
	}
	for _, o := range others {
		if err := os.Remove(o.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			run.Logger.WarnContext(ctx, "could not remove an old corp-code archive", slog.String("path", o.Path), slog.String("error", err.Error()))
			continue
		}
		if err := run.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
			return q.CorpCodeDownloadDelete(ctx, tx, o.InstanceID)
		}); err != nil {
			run.Logger.WarnContext(ctx, "could not forget an old corp-code archive", slog.String("path", o.Path), slog.String("error", err.Error()))
		}
	}
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func describe(statErr error, got, want string) string {
	if statErr != nil {
		return statErr.Error()
	}
	return fmt.Sprintf("sha256 %s, recorded %s", got, want)
}

// chunkKey is the key of chunk index of the archive with SHA-256 sum.
func chunkKey(sum string, index int) string { return fmt.Sprintf("%s:%05d", sum, index) }

func parseChunkKey(chunk string) (sum string, index int, err error) {
	sum, idx, ok := strings.Cut(chunk, ":")
	if ok {
		index, err = strconv.Atoi(idx)
	}
	if !ok || err != nil || len(sum) != sha256.Size*2 || index < 0 {
		return "", 0, fmt.Errorf("malformed chunk key %q", chunk)
	}
	return sum, index, nil
}

// modifyDate turns DART's YYYYMMDD into YYYY-MM-DD, or "" (stored as NULL)
// when it is not a date.
func modifyDate(s string) string {
	t, err := time.Parse("20060102", s)
	if err != nil {
		return ""
	}
	return t.Format(time.DateOnly)
}

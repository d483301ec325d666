// Package filing is the filingParse job: DART filings (list.json, paged) of
// the tracked companies or of given corp codes over a date range, one chunk
// per company, upserted idempotently into filing and flagged by the
// documented rules of RiskRules.
package filing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/upstream"
)

// PageSize is the page_count asked per call, DART's maximum.
const PageSize = 100

// ErrNoCompanies fails a run without corpCodes before any company is
// tracked: succeeding with nothing to do would hide that corpCodeSync never
// ran.
var ErrNoCompanies = errors.New("no tracked companies: run corpCodeSync first, or give corpCodes")

// Job implements batch.Job for filingParse.
type Job struct{}

var _ batch.Job = (*Job)(nil)
var _ batch.DomainRowCounter = (*Job)(nil)

// Plan implements batch.Job: one chunk per company, keyed by its corp code.
func (Job) Plan(ctx context.Context, run *batch.Run) (*batch.Plan, error) {
	p, err := decode(run.Params)
	if err != nil {
		return nil, err
	}
	chunks := p.CorpCodes
	if len(chunks) == 0 {
		rows, err := queries.New().CompanyTrackedList(ctx, run.DB)
		if err != nil {
			return nil, fmt.Errorf("error listing tracked companies: %w", err)
		}
		for _, r := range rows {
			chunks = append(chunks, r.CorpCode)
		}
		if len(chunks) == 0 {
			return nil, ErrNoCompanies
		}
	}
	return &batch.Plan{Chunks: chunks, Targets: batch.TargetsUnknown}, nil
}

// Process implements batch.Job: every page of one company's filings, then
// the upsert with their risk flags. An item is one listed filing; the
// chunk's targets are the filings DART declares (total_count), and a page
// shorter than that total implies is asked for again and then fails the
// chunk, naming the page (upstream.FetchPages).
func (Job) Process(ctx context.Context, run *batch.Run, corpCode string) (*batch.ChunkResult, error) {
	p, err := decode(run.Params)
	if err != nil {
		return nil, err
	}
	from, to := p.Range()
	filings, total, err := upstream.FetchPages(ctx, upstream.EndpointFilingList, corpCode, PageSize, upstream.PageAttemptsDefault,
		func(ctx context.Context, page int) ([]upstream.Filing, int, error) {
			body, err := run.Calls.Get(ctx, upstream.EndpointFilingList, upstream.FilingListQuery(corpCode, from, to, page, PageSize))
			if err != nil {
				return nil, 0, err
			}
			p, err := upstream.ParseFilingPage(body)
			if err != nil {
				return nil, 0, fmt.Errorf("company %s page %d: %w", corpCode, page, err)
			}
			return p.Filings, p.TotalCount, nil
		})
	if err != nil {
		return nil, err
	}

	res := &batch.ChunkResult{Targets: int64(total)} // DART's total_count, which FetchPages held every page to
	q := &queries.FilingUpsertParams{ExecutionID: run.ExecutionID}
	seen := make(map[string]bool, len(filings))
	for _, f := range filings {
		if seen[f.ReceiptNo] {
			res.Skipped++ // listed twice (pages shifted by a new filing): one row
			res.SkipReason = "filing listed twice across pages"
			continue
		}
		seen[f.ReceiptNo] = true
		received, _ := f.ReceivedAt() // ParseFilingPage checked it
		risk, reason := Classify(f.ReportName)
		q.RceptNos = append(q.RceptNos, f.ReceiptNo)
		q.CorpCodes = append(q.CorpCodes, f.CorpCode)
		q.CorpNames = append(q.CorpNames, f.CorpName)
		q.ReportNms = append(q.ReportNms, f.ReportName)
		q.RceptDts = append(q.RceptDts, received)
		q.FlrNms = append(q.FlrNms, f.FilerName)
		q.Rms = append(q.Rms, f.Remark)
		q.RiskFlags = append(q.RiskFlags, risk)
		q.RiskReasons = append(q.RiskReasons, reason)
	}
	res.Written = int64(len(q.RceptNos))
	if len(q.RceptNos) > 0 {
		res.Write = func(ctx context.Context, tx pgx.Tx) error {
			n, err := queries.New().FilingUpsert(ctx, tx, q)
			if err != nil {
				return fmt.Errorf("error upserting filings: %w", err)
			}
			if n != int64(len(q.RceptNos)) {
				return fmt.Errorf("upserted %d filings, expected %d", n, len(q.RceptNos))
			}
			return nil
		}
	}
	return res, nil
}

// DomainRows implements batch.DomainRowCounter.
func (Job) DomainRows(ctx context.Context, db queries.DBTX, executionIDs []int64) (int64, error) {
	return queries.New().FilingCountByExecutions(ctx, db, executionIDs)
}

// Estimate is filingParse's call estimate for the api (request.EstimateFunc):
// one page per company, the given corpCodes or else every tracked company.
func Estimate(ctx context.Context, db queries.DBTX, params *catalog.Params) (int, error) {
	p := params.Value.(*Params)
	if len(p.CorpCodes) > 0 {
		return len(p.CorpCodes), nil
	}
	n, err := queries.New().CompanyTrackedCount(ctx, db)
	if err != nil {
		return 0, fmt.Errorf("error counting tracked companies: %w", err)
	}
	return int(n), nil
}

func decode(raw json.RawMessage) (*Params, error) {
	return Spec().Params(raw)
}

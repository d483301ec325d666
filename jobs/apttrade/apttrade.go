// Package apttrade is the aptTrade job: apartment trades from MOLIT, one
// chunk per region×month (one call), upserted idempotently into apt_trade.
package apttrade

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/upstream"
)

// PageSize is the numOfRows asked per call; a region×month rarely has more
// trades, so a chunk is normally exactly one call.
const PageSize = 1000

// Job implements batch.Job for aptTrade.
type Job struct{}

var _ batch.Job = (*Job)(nil)
var _ batch.DomainRowCounter = (*Job)(nil)

// Plan implements batch.Job: one chunk per region×month, keyed REGION:YYYYMM.
func (Job) Plan(_ context.Context, run *batch.Run) (*batch.Plan, error) {
	p, err := decode(run.Params)
	if err != nil {
		return nil, err
	}
	var chunks []string
	for _, region := range p.Regions {
		for _, month := range p.Months() {
			chunks = append(chunks, region+":"+month)
		}
	}
	return &batch.Plan{Chunks: chunks, Targets: batch.TargetsUnknown}, nil
}

// Process implements batch.Job: fetch every page of one region×month, then
// hand the trades to the checkpoint transaction. The chunk's targets are
// the trades MOLIT declares (totalCount), not the trades that happened to
// arrive: a page shorter than the total implies is asked for again and then
// fails the chunk, naming the page (upstream.FetchPages).
func (Job) Process(ctx context.Context, run *batch.Run, chunk string) (*batch.ChunkResult, error) {
	region, month, ok := strings.Cut(chunk, ":")
	if !ok {
		return nil, fmt.Errorf("malformed chunk key %q", chunk)
	}
	trades, total, err := upstream.FetchPages(ctx, upstream.EndpointAptTrade, chunk, PageSize, upstream.PageAttemptsDefault,
		func(ctx context.Context, page int) ([]upstream.AptTrade, int, error) {
			body, err := run.Calls.Get(ctx, upstream.EndpointAptTrade, upstream.AptTradeQuery(region, month, page, PageSize))
			if err != nil {
				return nil, 0, err
			}
			trades, total, err := upstream.ParseAptTrades(region, month, body)
			if err != nil {
				return nil, 0, fmt.Errorf("%s %s: %w", upstream.EndpointAptTrade, chunk, err)
			}
			return trades, total, nil
		})
	if err != nil {
		return nil, err
	}

	// A trade listed twice in one answer is one row: count the second as skipped.
	seen := make(map[string]bool, len(trades))
	unique := trades[:0:0]
	for _, t := range trades {
		if seen[t.Serial] {
			continue
		}
		seen[t.Serial] = true
		unique = append(unique, t)
	}
	res := &batch.ChunkResult{
		Targets: int64(total), // MOLIT's totalCount, which FetchPages held every page to
		Written: int64(len(unique)),
		Skipped: int64(len(trades) - len(unique)),
	}
	if res.Skipped > 0 {
		res.SkipReason = "trade listed twice in one answer"
	}
	if len(unique) > 0 {
		res.Queue = func(b *pgx.Batch) { queueUpsert(ctx, b, run.ExecutionID, unique) }
	}
	return res, nil
}

// DomainRows implements batch.DomainRowCounter.
func (Job) DomainRows(ctx context.Context, db queries.DBTX, executionIDs []int64) (int64, error) {
	return queries.New().AptTradeCountByExecutions(ctx, db, executionIDs)
}

// UpsertParams are the arguments of the upsert (AptTradeUpsert) that writes
// trades for an execution.
func UpsertParams(executionID int64, trades []upstream.AptTrade) *queries.AptTradeUpsertParams {
	p := &queries.AptTradeUpsertParams{ExecutionID: executionID}
	for _, t := range trades {
		p.Regions = append(p.Regions, t.Region)
		p.DealYms = append(p.DealYms, t.DealYM)
		p.Serials = append(p.Serials, t.Serial)
		p.AptNames = append(p.AptNames, t.AptName)
		p.Dongs = append(p.Dongs, t.Dong)
		p.DealDates = append(p.DealDates, t.DealDate)
		p.Amounts = append(p.Amounts, t.AmountKRW)
		p.Areas = append(p.Areas, t.AreaM2)
		p.Floors = append(p.Floors, int32(t.Floor))
		p.BuildYears = append(p.BuildYears, int32(t.BuildYear))
	}
	return p
}

// queueUpsert adds the upsert of one chunk's trades to its commit batch.
// The upsert updates every conflicting row, so it affects each trade once;
// the count check is an alarm, not a guard: the batch has committed when
// its result is read.
func queueUpsert(ctx context.Context, b *pgx.Batch, executionID int64, trades []upstream.AptTrade) {
	p := UpsertParams(executionID, trades)
	queries.Queue(b, func(db queries.DBTX) { _, _ = queries.New().AptTradeUpsert(ctx, db, p) }).
		Exec(func(tag pgconn.CommandTag) error {
			if n := tag.RowsAffected(); n != int64(len(trades)) {
				return fmt.Errorf("upserted %d trades, expected %d", n, len(trades))
			}
			return nil
		})
}

func decode(raw json.RawMessage) (*Params, error) {
	return Spec().Params(raw)
}

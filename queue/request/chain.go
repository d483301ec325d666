package request

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/radartype"
)

// enqueueNext inserts, inside tx, the request of the job that follows job
// in the catalog (source chain), with the finished run's params when the
// next job accepts them and {} otherwise. A next job that already has an
// active request is skipped and counted as a duplicate, not an error. It
// returns the new request id, or 0 when nothing was inserted.
func (o *Owner) enqueueNext(ctx context.Context, tx pgx.Tx, job string, params []byte) (int64, error) {
	def, ok := o.cfg.Catalog.Lookup(job)
	if !ok || def.Next() == "" {
		return 0, nil
	}
	next, ok := o.cfg.Catalog.Lookup(def.Next())
	if !ok {
		return 0, fmt.Errorf("job %s chains to unknown job %q", job, def.Next())
	}
	if _, err := next.Decode(params); err != nil {
		params = []byte("{}")
	}
	// A savepoint keeps a refused insert from poisoning the completion.
	savepoint, err := tx.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("error opening savepoint: %w", err)
	}
	res, err := o.EnqueueTx(ctx, savepoint, &EnqueueParams{Job: next.Name(), Params: params, Source: radartype.SourceChain, RequestedBy: "chain:" + job})
	var dup *DuplicateError
	if errors.As(err, &dup) {
		_ = savepoint.Rollback(ctx)
		o.cfg.Instruments.RequestRecorded(ctx, next.Name(), radartype.SourceChain, observability.ResultDuplicate)
		return 0, nil
	}
	if err != nil {
		_ = savepoint.Rollback(ctx)
		return 0, err
	}
	if err := savepoint.Commit(ctx); err != nil {
		return 0, fmt.Errorf("error releasing savepoint: %w", err)
	}
	o.cfg.Instruments.RequestRecorded(ctx, next.Name(), radartype.SourceChain, observability.ResultAccepted)
	return res.Request.ID, nil
}

package queries

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PlanEachCall returns db with every statement sent as an unnamed statement
// (pgx's QueryExecModeCacheDescribe), which the server plans at each call,
// whatever the connection's default mode. A statement prepared on a
// long-lived connection keeps the plan PostgreSQL chose when it was
// prepared: chosen while a table was small, it outlives ANALYZE, and GET
// /v1/jobs fell from 940 to 8 requests a second once 100,000 executions had
// been added under it. The api's reads, whose plans depend on how much
// history there is, go through PlanEachCall; its enqueue, a few statements
// whose plans do not (lookups by key, inserts), keeps the pool's cached
// statements and saves their planning on every request's pickup.
func PlanEachCall(db DBTX) DBTX { return planEachCall{db: db} }

type planEachCall struct{ db DBTX }

func planned(args []any) []any {
	return append([]any{pgx.QueryExecModeCacheDescribe}, args...)
}

func (p planEachCall) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return p.db.Exec(ctx, sql, planned(args)...)
}

func (p planEachCall) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return p.db.Query(ctx, sql, planned(args)...)
}

func (p planEachCall) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return p.db.QueryRow(ctx, sql, planned(args)...)
}

func (p planEachCall) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	return p.db.CopyFrom(ctx, table, columns, src)
}

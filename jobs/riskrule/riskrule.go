// Package riskrule is the rules job: it evaluates the documented rule set
// (Set, in spec.go beside the job's definition; each threshold its default
// or BUILDRISK_RULE_<NAME>) over one date's risk_metric rows and writes
// risk_alert rows carrying the rule, its severity and the values that fired
// it. One chunk is one company; its
// transaction deletes the company's alerts of the date and inserts the new
// ones, so re-running a date replaces that date's alerts idempotently.
package riskrule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
)

// ErrNoMetrics fails a run for a date without metrics (and without alerts to
// replace): succeeding would report a clean radar that was never computed.
var ErrNoMetrics = errors.New("no risk metrics for the date: run metrics first (it chains to rules)")

// Job implements batch.Job for rules.
type Job struct {
	// Thresholds override the rules' defaults (cmd/radar reads them from
	// BUILDRISK_RULE_<NAME>); a rule missing here uses its default.
	Thresholds Thresholds
}

var _ batch.Job = (*Job)(nil)
var _ batch.DomainRowCounter = (*Job)(nil)

// Plan implements batch.Job: one chunk per company with metrics on the date
// or alerts to replace, keyed by corp code.
func (Job) Plan(ctx context.Context, run *batch.Run) (*batch.Plan, error) {
	p, err := decode(run.Params)
	if err != nil {
		return nil, err
	}
	q := queries.New()
	if p.OnlyMissing {
		// Coverage's own definition of the missing targets.
		chunks, err := batch.AllPages(func(after string, limit int32) ([]string, error) {
			return q.CoverageRulesMissing(ctx, run.DB, &queries.CoverageRulesMissingParams{DataDate: p.Day(), After: after, RowLimit: limit})
		})
		if err != nil {
			return nil, fmt.Errorf("error listing the companies not checked: %w", err)
		}
		return &batch.Plan{Chunks: chunks, Targets: batch.TargetsUnknown}, nil
	}
	withMetrics, err := q.RiskMetricCorpCodesByDate(ctx, run.DB, p.Day())
	if err != nil {
		return nil, fmt.Errorf("error listing the date's metrics: %w", err)
	}
	withAlerts, err := q.RiskAlertCorpCodesByDate(ctx, run.DB, p.Day())
	if err != nil {
		return nil, fmt.Errorf("error listing the date's alerts: %w", err)
	}
	if len(withMetrics) == 0 && len(withAlerts) == 0 {
		return nil, fmt.Errorf("%s: %w", p.Date, ErrNoMetrics)
	}
	chunks := slices.Concat(withMetrics, withAlerts)
	slices.Sort(chunks)
	return &batch.Plan{Chunks: slices.Compact(chunks), Targets: batch.TargetsUnknown}, nil
}

// Process implements batch.Job: evaluate the company's metrics; the write
// replaces its alerts of the date. The item is the company: written when it
// had metrics, skipped (its stale alerts removed) when it had none.
func (j Job) Process(ctx context.Context, run *batch.Run, corpCode string) (*batch.ChunkResult, error) {
	p, err := decode(run.Params)
	if err != nil {
		return nil, err
	}
	day := p.Day()
	row, err := queries.New().RiskMetricGet(ctx, run.DB, &queries.RiskMetricGetParams{CorpCode: corpCode, MetricDate: day})
	res := &batch.ChunkResult{Targets: 1}
	var alerts []Alert
	switch err := queries.Interpret(err); {
	case err == nil:
		alerts = Evaluate(metricFromRow(row), j.Thresholds)
		res.Written = 1
	case errors.Is(err, queries.ErrNotFound):
		res.Skipped = 1
	default:
		return nil, fmt.Errorf("error reading metrics of %s: %w", corpCode, err)
	}
	inserts := make([]*queries.RiskAlertInsertParams, len(alerts))
	for i, a := range alerts {
		values, err := json.Marshal(a.Values)
		if err != nil {
			return nil, fmt.Errorf("error encoding alert values: %w", err)
		}
		inserts[i] = &queries.RiskAlertInsertParams{
			CorpCode: corpCode, AlertDate: day, Rule: a.Rule, Severity: a.Severity, Values: values, ExecutionID: run.ExecutionID,
		}
	}
	res.Write = func(ctx context.Context, tx pgx.Tx) error {
		if err := replace(ctx, tx, corpCode, day, inserts); err != nil {
			return err
		}
		if res.Written == 0 {
			return nil
		}
		// The coverage marker: this company's metrics of day were evaluated.
		return queries.New().RiskRuleCheckUpsert(ctx, tx, &queries.RiskRuleCheckUpsertParams{
			AlertDate: day, CorpCode: corpCode, ExecutionID: run.ExecutionID,
		})
	}
	return res, nil
}

// replace deletes a company's alerts of day and inserts the new ones, in the
// chunk's transaction.
func replace(ctx context.Context, tx pgx.Tx, corpCode string, day time.Time, inserts []*queries.RiskAlertInsertParams) error {
	q := queries.New()
	if _, err := q.RiskAlertDeleteByCorpDate(ctx, tx, &queries.RiskAlertDeleteByCorpDateParams{CorpCode: corpCode, AlertDate: day}); err != nil {
		return fmt.Errorf("error deleting old alerts: %w", err)
	}
	for _, in := range inserts {
		if err := q.RiskAlertInsert(ctx, tx, in); err != nil {
			return fmt.Errorf("error inserting alert %s: %w", in.Rule, err)
		}
	}
	return nil
}

// DomainRows implements batch.DomainRowCounter: the alerts the instance's
// executions wrote.
func (Job) DomainRows(ctx context.Context, db queries.DBTX, executionIDs []int64) (int64, error) {
	return queries.New().RiskAlertCountByExecutions(ctx, db, executionIDs)
}

func metricFromRow(r *queries.RiskMetricGetRow) *Metric {
	m := &Metric{
		Drawdown20d:     numeric(r.Drawdown20d),
		RiskFilings90d:  int64(r.RiskFilings90d),
		AptVolumeChange: numeric(r.AptVolumeChange),
		AptPriceChange:  numeric(r.AptPriceChange),
	}
	if r.GradeChangeNotches != nil {
		n := int64(*r.GradeChangeNotches)
		m.GradeChangeNotches = &n
	}
	return m
}

func numeric(n pgtype.Numeric) *float64 {
	f, err := n.Float64Value()
	if err != nil || !f.Valid {
		return nil
	}
	return &f.Float64
}

func decode(raw json.RawMessage) (*Params, error) {
	return Spec().Params(raw)
}

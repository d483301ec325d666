package testfactory

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/buildrisk/radar/queries"
)

// The jobs' domain rows and the providers' call ledger, written through the
// upserts the jobs and the call budget use.

// Exposure loads ledger lines (queries.ExposureUpsert, as `radar import
// exposure` does): corp code → outstanding amount in KRW (0: repaid, not a
// target).
func Exposure(ctx context.Context, tb testing.TB, db queries.DBTX, outstanding map[string]int64) {
	tb.Helper()
	p := &queries.ExposureUpsertParams{}
	for code, krw := range outstanding {
		p.CorpCodes = append(p.CorpCodes, code)
		p.OutstandingKrws = append(p.OutstandingKrws, krw)
	}
	_, err := q.ExposureUpsert(ctx, db, p)
	must(tb, err, "loading exposure")
}

// CreditGradeOpts are the fields of a company's grade of a day.
type CreditGradeOpts struct {
	CorpCode string
	// EvalDate defaults to today (UTC); Grade to A; Source to lookup.
	EvalDate    time.Time
	Grade       string
	Outlook     string
	Source      string
	ExecutionID int64
}

// CreditGrade writes a grade (queries.CreditGradeUpsert, as creditEval's
// chunk commit does).
func CreditGrade(ctx context.Context, tb testing.TB, db queries.DBTX, opts *CreditGradeOpts) {
	tb.Helper()
	day := opts.EvalDate
	if day.IsZero() {
		day = time.Now().UTC()
	}
	_, err := q.CreditGradeUpsert(ctx, db, &queries.CreditGradeUpsertParams{
		EvalDate: day, ExecutionID: opts.ExecutionID, CorpCodes: []string{opts.CorpCode},
		Grades: []string{or(opts.Grade, "A")}, Outlooks: []string{opts.Outlook}, Sources: []string{or(opts.Source, "lookup")},
	})
	must(tb, err, "writing the grade of "+opts.CorpCode)
}

// CompanyOpts are the fields of a company of the corp-code archive.
type CompanyOpts struct {
	CorpCode string
	// Name defaults to the corp code.
	Name    string
	EngName string
	// StockCode is empty for an unlisted company.
	StockCode string
	// Untracked companies are not the jobs' targets (tracked by default).
	Untracked   bool
	ExecutionID int64
}

// Company writes a company (queries.CompanyUpsert, as corpCodeSync does).
func Company(ctx context.Context, tb testing.TB, db queries.DBTX, opts *CompanyOpts) {
	tb.Helper()
	_, err := q.CompanyUpsert(ctx, db, &queries.CompanyUpsertParams{
		CorpCodes: []string{opts.CorpCode}, Names: []string{or(opts.Name, opts.CorpCode)}, EngNames: []string{opts.EngName},
		StockCodes: []string{opts.StockCode}, ModifyDates: []string{""}, Tracked: []bool{!opts.Untracked}, ExecutionID: opts.ExecutionID,
	})
	must(tb, err, "writing company "+opts.CorpCode)
}

// StockPriceOpts are the fields of a listed company's price of a day.
type StockPriceOpts struct {
	ShortCode string
	// TradeDate defaults to today (UTC); CorpCode to "x"; the prices and
	// volume to 1.
	TradeDate   time.Time
	CorpCode    string
	Close       int64
	ExecutionID int64
}

// StockPrice writes a price (queries.StockPriceUpsert, as stockPrice does).
func StockPrice(ctx context.Context, tb testing.TB, db queries.DBTX, opts *StockPriceOpts) {
	tb.Helper()
	day := opts.TradeDate
	if day.IsZero() {
		day = time.Now().UTC()
	}
	price := opts.Close
	if price == 0 {
		price = 1
	}
	one := []int64{1}
	_, err := q.StockPriceUpsert(ctx, db, &queries.StockPriceUpsertParams{
		ShortCodes: []string{opts.ShortCode}, TradeDates: []time.Time{day}, CorpCodes: []string{or(opts.CorpCode, "x")},
		Closes: []int64{price}, Opens: one, Highs: one, Lows: one, Volumes: one, MarketCaps: one, ExecutionID: opts.ExecutionID,
	})
	must(tb, err, "writing the price of "+opts.ShortCode)
}

// RiskMetric writes a company's metrics of a day, all empty
// (queries.RiskMetricUpsert, as metrics does).
func RiskMetric(ctx context.Context, tb testing.TB, db queries.DBTX, corpCode string, day time.Time, executionID int64) {
	tb.Helper()
	must(tb, q.RiskMetricUpsert(ctx, db, &queries.RiskMetricUpsertParams{CorpCode: corpCode, MetricDate: day, ExecutionID: executionID}),
		"writing the metrics of "+corpCode)
}

// RiskRuleCheck marks a company's metrics of a day as evaluated by rules
// (queries.RiskRuleCheckUpsert).
func RiskRuleCheck(ctx context.Context, tb testing.TB, db queries.DBTX, corpCode string, day time.Time, executionID int64) {
	tb.Helper()
	must(tb, q.RiskRuleCheckUpsert(ctx, db, &queries.RiskRuleCheckUpsertParams{CorpCode: corpCode, AlertDate: day, ExecutionID: executionID}),
		"writing the rule check of "+corpCode)
}

// RiskAlertOpts are the fields of an alert rules raised.
type RiskAlertOpts struct {
	CorpCode string
	// AlertDate defaults to today (UTC); Severity to high; Values to {}.
	AlertDate   time.Time
	Rule        string
	Severity    string
	Values      []byte
	ExecutionID int64
}

// RiskAlert writes an alert (queries.RiskAlertInsert, as rules does).
func RiskAlert(ctx context.Context, tb testing.TB, db queries.DBTX, opts *RiskAlertOpts) {
	tb.Helper()
	day := opts.AlertDate
	if day.IsZero() {
		day = time.Now().UTC()
	}
	must(tb, q.RiskAlertInsert(ctx, db, &queries.RiskAlertInsertParams{
		CorpCode: opts.CorpCode, AlertDate: day, Rule: opts.Rule, Severity: or(opts.Severity, "high"), Values: orJSON(opts.Values), ExecutionID: opts.ExecutionID,
	}), "writing an alert of "+opts.CorpCode)
}

// ProviderCallBudgetOpts are a provider's calls of a day.
type ProviderCallBudgetOpts struct {
	Provider string
	// Day defaults to the database's current_date, DaysAgo days back.
	Day       time.Time
	DaysAgo   int
	CallsUsed int32
}

// ProviderCallBudget records the calls a provider's daily cap has spent
// (queries.ProviderCallBudgetLock creates the day's row, ProviderCallBudgetSet
// sets it), as the call budget does.
func ProviderCallBudget(ctx context.Context, tb testing.TB, db queries.DBTX, opts *ProviderCallBudgetOpts) {
	tb.Helper()
	day := budgetDay(ctx, tb, db, opts.Day, opts.DaysAgo)
	_, err := q.ProviderCallBudgetLock(ctx, db, &queries.ProviderCallBudgetLockParams{Provider: opts.Provider, Day: day})
	must(tb, err, "creating the budget of "+opts.Provider)
	must(tb, q.ProviderCallBudgetSet(ctx, db, &queries.ProviderCallBudgetSetParams{Provider: opts.Provider, Day: day, CallsUsed: opts.CallsUsed}),
		"setting the budget of "+opts.Provider)
}

// ProviderCallLeaseOpts are the fields of a holder's lease of calls.
type ProviderCallLeaseOpts struct {
	Provider string
	// Day defaults to the database's current_date.
	Day              time.Time
	Holder           string
	Granted, Claimed int32
	// TTL is how long from now the lease runs (0: it expires now).
	TTL time.Duration
}

// ProviderCallLease records a lease (queries.ProviderCallLeaseInsert) and
// returns its id. The calls it grants are not added to the day's budget:
// set that with ProviderCallBudget.
func ProviderCallLease(ctx context.Context, tb testing.TB, db queries.DBTX, opts *ProviderCallLeaseOpts) int64 {
	tb.Helper()
	id, err := q.ProviderCallLeaseInsert(ctx, db, &queries.ProviderCallLeaseInsertParams{
		Provider: opts.Provider, Day: budgetDay(ctx, tb, db, opts.Day, 0), Holder: opts.Holder,
		Granted: opts.Granted, Claimed: opts.Claimed, TtlSeconds: opts.TTL.Seconds(),
	})
	must(tb, err, "recording a lease of "+opts.Provider)
	return id
}

func budgetDay(ctx context.Context, tb testing.TB, db queries.DBTX, day time.Time, daysAgo int) time.Time {
	tb.Helper()
	if !day.IsZero() {
		return day
	}
	must(tb, db.QueryRow(ctx, `SELECT current_date - $1::int`, daysAgo).Scan(&day), "reading the database's date")
	return day
}

// IdempotencyKeyOpts are the fields of an API call's recorded key.
type IdempotencyKeyOpts struct {
	// TokenName defaults to operator; Key to a new one; Operation to
	// "POST /v1/jobs/aptTrade/requests"; Status to 202; Response to {}.
	TokenName   string
	Key         string
	Fingerprint []byte
	Operation   string
	Status      int16
	Response    []byte
	// Retention is how long from now the key is kept; 0 or less: it has
	// already expired.
	Retention time.Duration
}

// IdempotencyKey records a call's key (queries.IdempotencyKeyRecord, as the
// api does) and returns the key.
func IdempotencyKey(ctx context.Context, tb testing.TB, db queries.DBTX, opts *IdempotencyKeyOpts) string {
	tb.Helper()
	key := opts.Key
	if key == "" {
		key = fmt.Sprintf("factory-key-%d", next())
	}
	status := opts.Status
	if status == 0 {
		status = 202
	}
	retention := opts.Retention
	if retention <= 0 {
		retention = -time.Second
	}
	fingerprint := opts.Fingerprint
	if fingerprint == nil {
		fingerprint = []byte(key)
	}
	n, err := q.IdempotencyKeyRecord(ctx, db, &queries.IdempotencyKeyRecordParams{
		TokenName: or(opts.TokenName, "operator"), Key: key, Fingerprint: fingerprint,
		Operation: or(opts.Operation, "POST /v1/jobs/aptTrade/requests"), Status: status, Response: orJSON(opts.Response),
		RetentionSeconds: retention.Seconds(),
	})
	must(tb, err, "recording key "+key)
	if n != 1 {
		tb.Fatalf("testfactory: key %s is already recorded and kept", key)
	}
	return key
}

// ExpireIdempotencyKeys ages every recorded key past its retention, as
// time would (no query moves expires_at back).
func ExpireIdempotencyKeys(ctx context.Context, tb testing.TB, db queries.DBTX) {
	tb.Helper()
	_, err := db.Exec(ctx, `UPDATE idempotency_key SET expires_at = now() - interval '1 second'`)
	must(tb, err, "expiring idempotency keys")
}

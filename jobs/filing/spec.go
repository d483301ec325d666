package filing

import (
	"fmt"
	"slices"
	"time"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queue/batch"
)

// Name is the name of the DART filing job.
const Name = "filingParse"

// Bounds of filingParse's params.
const (
	// MaxDays bounds one request's from..to range.
	MaxDays = 366
	// MaxCorpCodes bounds an explicit corpCodes list.
	MaxCorpCodes = 5000
	// ScheduledDays is the window of a scheduled run: the last 90 days,
	// which is what metrics counts risk filings over.
	ScheduledDays = 90
)

// Params are filingParse's params. The API names their schema
// FilingParseParams, after the job.
type Params struct {
	From      string   `json:"from" doc:"first receipt date, YYYY-MM-DD, from 2006 to the end of next year" pattern:"^[0-9]{4}-[0-9]{2}-[0-9]{2}$" example:"2025-01-01"`
	To        string   `json:"to" doc:"last receipt date, YYYY-MM-DD, from 2006 to the end of next year (at most 366 days from from, both included)" pattern:"^[0-9]{4}-[0-9]{2}-[0-9]{2}$" example:"2025-03-31"`
	CorpCodes []string `json:"corpCodes,omitempty" doc:"8-digit DART corp codes; default: every tracked company" maxItems:"5000" example:"00126380"`
}

// Range returns From and To as dates. Only valid params.
func (p *Params) Range() (from, to time.Time) {
	from, _ = time.Parse(time.DateOnly, p.From)
	to, _ = time.Parse(time.DateOnly, p.To)
	return from, to
}

// Spec defines filingParse: DART filings per company, flagged when
// risk-relevant.
//
// Estimate: one list.json page (100 filings) per company, which covers a
// company's filings over a year in all but rare cases; len(corpCodes) when
// given. Without corpCodes the targets are the tracked companies, which only
// the database knows: the api's estimator (Estimate) counts them.
//
// Coverage: none yet. A company with no filing in the window leaves no
// filing row, so "checked for the window" is invisible in the domain
// tables; a checked-marker per company and window (as risk_rule_check is
// for rules) would make it countable.
func Spec() *catalog.Spec[Params] {
	return &catalog.Spec[Params]{
		JobName: Name,
		Desc: "Lists DART filings received from..to for every tracked company (or corpCodes), upserts them into filing " +
			"and flags risk-relevant ones (dishonour, rehabilitation, business suspension, non-unqualified audit opinion, " +
			"lawsuits, ...) with a reason.",
		ProviderName:    "DART",
		ChunkDesc:       "one company (one call per page of 100 filings)",
		ExampleValue:    Params{From: "2025-01-01", To: "2025-03-31", CorpCodes: []string{"00126380"}},
		DefaultSchedule: "30 18 * * *",
		Scheduled: func(now time.Time) Params {
			today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
			return Params{
				From: today.AddDate(0, 0, -(ScheduledDays - 1)).Format(time.DateOnly),
				To:   today.Format(time.DateOnly),
			}
		},
		Validate: validate,
		Estimate: func(p *Params) int { return len(p.CorpCodes) },
	}
}

func validate(p *Params) error {
	from, err := catalog.ParseDate(p.From, "params.from")
	if err != nil {
		return err
	}
	to, err := catalog.ParseDate(p.To, "params.to")
	if err != nil {
		return err
	}
	if from.After(to) {
		return &catalog.ParamError{Field: "params.from", Message: fmt.Sprintf("from %s is after to %s", p.From, p.To)}
	}
	if days := int(to.Sub(from).Hours()/24) + 1; days > MaxDays {
		return &catalog.ParamError{Field: "params.to", Message: fmt.Sprintf("range is %d days; at most %d", days, MaxDays)}
	}
	if len(p.CorpCodes) > MaxCorpCodes {
		return &catalog.ParamError{Field: "params.corpCodes", Message: fmt.Sprintf("%d corp codes; at most %d", len(p.CorpCodes), MaxCorpCodes)}
	}
	for i, c := range p.CorpCodes {
		if !catalog.IsCorpCode(c) {
			return &catalog.ParamError{Field: fmt.Sprintf("params.corpCodes[%d]", i), Message: fmt.Sprintf("%s is not an 8-digit DART corp code", catalog.Quote(c))}
		}
	}
	if len(p.CorpCodes) == 0 {
		p.CorpCodes = nil // [] and absent are the same work
	}
	slices.Sort(p.CorpCodes)
	p.CorpCodes = slices.Compact(p.CorpCodes)
	return nil
}

// Registration is filingParse as a process registers it: its definition,
// its implementation and its call estimate, which counts the tracked
// companies when no corpCodes are given (Estimate).
func Registration() batch.Registration {
	return batch.Registration{Definition: Spec(), Job: Job{}, Estimate: Estimate}
}

package jobs

import (
	"fmt"
	"regexp"
	"slices"
	"time"
)

// FilingParse is the name of the DART filing job.
const FilingParse = "filingParse"

// Bounds of filingParse's params.
const (
	// FilingParseMaxDays bounds one request's from..to range.
	FilingParseMaxDays = 366
	// FilingParseMaxCorpCodes bounds an explicit corpCodes list.
	FilingParseMaxCorpCodes = 5000
	// FilingParseScheduledDays is the window of a scheduled run: the last
	// 90 days, which is what metrics counts risk filings over.
	FilingParseScheduledDays = 90
)

var corpCodePattern = regexp.MustCompile(`^[0-9]{8}$`)

// Seoul is Korea Standard Time (UTC+9; Korea has had no daylight saving
// since 1988): the calendar of DART, KRX and MOLIT dates, and the "today" of
// a date param left empty.
var Seoul = time.FixedZone("KST", 9*60*60)

// TodayInSeoul returns now's calendar date in Seoul as YYYY-MM-DD.
func TodayInSeoul(now time.Time) string { return now.In(Seoul).Format(time.DateOnly) }

// FilingParseParams are filingParse's params.
type FilingParseParams struct {
	From      string   `json:"from" doc:"first receipt date, YYYY-MM-DD, from 2006 to the end of next year" pattern:"^[0-9]{4}-[0-9]{2}-[0-9]{2}$" example:"2025-01-01"`
	To        string   `json:"to" doc:"last receipt date, YYYY-MM-DD, from 2006 to the end of next year (at most 366 days from from, both included)" pattern:"^[0-9]{4}-[0-9]{2}-[0-9]{2}$" example:"2025-03-31"`
	CorpCodes []string `json:"corpCodes,omitempty" doc:"8-digit DART corp codes; default: every tracked company" maxItems:"5000" example:"00126380"`
}

// Range returns From and To as dates. Only valid params.
func (p *FilingParseParams) Range() (from, to time.Time) {
	from, _ = time.Parse(time.DateOnly, p.From)
	to, _ = time.Parse(time.DateOnly, p.To)
	return from, to
}

// FilingParseSpec defines filingParse: DART filings per company, flagged
// when risk-relevant.
//
// Estimate: one list.json page (100 filings) per company, which covers a
// company's filings over a year in all but rare cases; len(corpCodes) when
// given. Without corpCodes the targets are the tracked companies, which only
// the database knows: the api's estimator (filing.Estimate) counts them.
//
// Coverage: none yet. A company with no filing in the window leaves no
// filing row, so "checked for the window" is invisible in the domain
// tables; a checked-marker per company and window (as risk_rule_check is
// for rules) would make it countable.
func FilingParseSpec() *Spec[FilingParseParams] {
	return &Spec[FilingParseParams]{
		JobName: FilingParse,
		Desc: "Lists DART filings received from..to for every tracked company (or corpCodes), upserts them into filing " +
			"and flags risk-relevant ones (dishonour, rehabilitation, business suspension, non-unqualified audit opinion, " +
			"lawsuits, ...) with a reason.",
		ProviderName:    "DART",
		ChunkDesc:       "one company (one call per page of 100 filings)",
		ExampleValue:    FilingParseParams{From: "2025-01-01", To: "2025-03-31", CorpCodes: []string{"00126380"}},
		DefaultSchedule: "30 18 * * *",
		Scheduled: func(now time.Time) FilingParseParams {
			today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
			return FilingParseParams{
				From: today.AddDate(0, 0, -(FilingParseScheduledDays - 1)).Format(time.DateOnly),
				To:   today.Format(time.DateOnly),
			}
		},
		Validate: validateFilingParse,
		Estimate: func(p *FilingParseParams) int { return len(p.CorpCodes) },
	}
}

func validateFilingParse(p *FilingParseParams) error {
	from, err := parseDate(p.From, "params.from")
	if err != nil {
		return err
	}
	to, err := parseDate(p.To, "params.to")
	if err != nil {
		return err
	}
	if from.After(to) {
		return &ParamError{Field: "params.from", Message: fmt.Sprintf("from %s is after to %s", p.From, p.To)}
	}
	if days := int(to.Sub(from).Hours()/24) + 1; days > FilingParseMaxDays {
		return &ParamError{Field: "params.to", Message: fmt.Sprintf("range is %d days; at most %d", days, FilingParseMaxDays)}
	}
	if len(p.CorpCodes) > FilingParseMaxCorpCodes {
		return &ParamError{Field: "params.corpCodes", Message: fmt.Sprintf("%d corp codes; at most %d", len(p.CorpCodes), FilingParseMaxCorpCodes)}
	}
	for i, c := range p.CorpCodes {
		if !corpCodePattern.MatchString(c) {
			return &ParamError{Field: fmt.Sprintf("params.corpCodes[%d]", i), Message: fmt.Sprintf("%s is not an 8-digit DART corp code", Quote(c))}
		}
	}
	if len(p.CorpCodes) == 0 {
		p.CorpCodes = nil // [] and absent are the same work
	}
	slices.Sort(p.CorpCodes)
	p.CorpCodes = slices.Compact(p.CorpCodes)
	return nil
}

// parseDate parses a required YYYY-MM-DD date param named field.
func parseDate(s, field string) (time.Time, error) {
	if s == "" {
		return time.Time{}, &ParamError{Field: field, Message: "required, format YYYY-MM-DD"}
	}
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return time.Time{}, &ParamError{Field: field, Message: fmt.Sprintf("%s is not a date in the form YYYY-MM-DD", Quote(s))}
	}
	return t, checkDateRange(t, field, s)
}

// DateMin is the earliest date or month a param accepts: MOLIT's trade
// records start in 2006, and nothing older is of use to a risk radar.
var DateMin = time.Date(2006, time.January, 1, 0, 0, 0, 0, time.UTC)

// DateMax returns the latest date a param accepts at now: the last day of
// next year (a schedule near New Year may ask for tomorrow).
func DateMax(now time.Time) time.Time {
	return time.Date(now.Year()+1, time.December, 31, 0, 0, 0, 0, time.UTC)
}

// dateRangeDoc says the range in the params' schema descriptions.
const dateRangeDoc = "from 2006 to the end of next year"

func checkDateRange(t time.Time, field, s string) error {
	if t.Before(DateMin) || t.After(DateMax(time.Now())) {
		return &ParamError{Field: field, Message: fmt.Sprintf("%s is out of range (%s)", Quote(s), dateRangeDoc)}
	}
	return nil
}

// IsCorpCode reports whether s is an 8-digit DART corp code.
func IsCorpCode(s string) bool { return corpCodePattern.MatchString(s) }

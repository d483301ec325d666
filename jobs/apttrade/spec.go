package apttrade

import (
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queue/batch"
)

// Name is the name of the apartment-trade job.
const Name = "aptTrade"

// Bounds of aptTrade's params.
const (
	// MaxMonths bounds one request's month range.
	MaxMonths = 120
	// MaxRegions bounds the regions list.
	MaxRegions = 500
)

var lawdCodePattern = regexp.MustCompile(`^[0-9]{5}$`)

// SeoulDistricts are the LAWD codes of Seoul's 25 districts, the default
// regions of a scheduled aptTrade run.
var SeoulDistricts = []string{
	"11110", "11140", "11170", "11200", "11215", "11230", "11260", "11290", "11305", "11320",
	"11350", "11380", "11410", "11440", "11470", "11500", "11530", "11545", "11560", "11590",
	"11620", "11650", "11680", "11710", "11740",
}

// Params are aptTrade's params. The API names their schema
// AptTradeParams, after the job.
type Params struct {
	Regions []string `json:"regions" doc:"5-digit legal-district (LAWD) codes" minItems:"1" maxItems:"500" example:"11110"`
	From    string   `json:"from" doc:"first month, YYYY-MM, from 2006-01 to December of next year" pattern:"^[0-9]{4}-[0-9]{2}$" example:"2025-01"`
	To      string   `json:"to" doc:"last month, YYYY-MM, from 2006-01 to December of next year (at most 120 months after from)" pattern:"^[0-9]{4}-[0-9]{2}$" example:"2025-03"`
}

// Months returns every month from From to To as YYYYMM. Only valid params.
func (p *Params) Months() []string {
	from, _ := time.Parse("2006-01", p.From)
	to, _ := time.Parse("2006-01", p.To)
	var months []string
	for m := from; !m.After(to); m = m.AddDate(0, 1, 0) {
		months = append(months, m.Format("200601"))
	}
	return months
}

// Spec defines aptTrade: MOLIT apartment trades per region×month.
//
// Coverage: none yet. Its targets (the requested regions × months) come
// from each request's params, not from a table, and a region×month with
// no trade leaves no apt_trade row, so "fetched" is invisible in the
// domain tables; a fetched-marker per region×month (as risk_rule_check is
// for rules) would make it countable.
func Spec() *catalog.Spec[Params] {
	return &catalog.Spec[Params]{
		JobName:         Name,
		Desc:            "Apartment trades from MOLIT for each region and month, upserted into apt_trade.",
		ProviderName:    "MOLIT",
		ChunkDesc:       "one region×month (1 call)",
		ExampleValue:    Params{Regions: []string{"11110", "11140"}, From: "2025-01", To: "2025-03"},
		DefaultSchedule: "0 4 * * *",
		// A scheduled run refreshes last month for Seoul's districts.
		Scheduled: func(now time.Time) Params {
			month := now.AddDate(0, -1, 0).Format("2006-01")
			return Params{Regions: slices.Clone(SeoulDistricts), From: month, To: month}
		},
		Validate: validate,
		Estimate: func(p *Params) int {
			return len(p.Regions) * len(p.Months())
		},
	}
}

func validate(p *Params) error {
	if len(p.Regions) == 0 {
		return &catalog.ParamError{Field: "params.regions", Message: "at least one 5-digit region code is required"}
	}
	if len(p.Regions) > MaxRegions {
		return &catalog.ParamError{Field: "params.regions", Message: fmt.Sprintf("%d regions; at most %d", len(p.Regions), MaxRegions)}
	}
	for i, r := range p.Regions {
		if !lawdCodePattern.MatchString(r) {
			return &catalog.ParamError{Field: fmt.Sprintf("params.regions[%d]", i), Message: fmt.Sprintf("%s is not a 5-digit legal-district code", catalog.Quote(r))}
		}
	}
	slices.Sort(p.Regions)
	p.Regions = slices.Compact(p.Regions)
	from, err := catalog.ParseMonth(p.From, "params.from")
	if err != nil {
		return err
	}
	to, err := catalog.ParseMonth(p.To, "params.to")
	if err != nil {
		return err
	}
	if from.After(to) {
		return &catalog.ParamError{Field: "params.from", Message: fmt.Sprintf("from %s is after to %s", p.From, p.To)}
	}
	if months := (to.Year()-from.Year())*12 + int(to.Month()-from.Month()) + 1; months > MaxMonths {
		return &catalog.ParamError{Field: "params.to", Message: fmt.Sprintf("range is %d months; at most %d", months, MaxMonths)}
	}
	return nil
}

// Registration is aptTrade as a process registers it: its definition and
// its implementation.
func Registration() batch.Registration {
	return batch.Registration{Definition: Spec(), Job: Job{}}
}

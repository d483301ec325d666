package catalog

import (
	"fmt"
	"regexp"
	"time"
)

// The params fields several jobs share: dates and months in a bounded
// range, the "today" of a date left empty, and DART corp codes. A job's
// own fields and rules are in its package's spec.go.

// Seoul is Korea Standard Time (UTC+9; Korea has had no daylight saving
// since 1988): the calendar of DART, KRX and MOLIT dates, and the "today" of
// a date param left empty.
var Seoul = time.FixedZone("KST", 9*60*60)

// TodayInSeoul returns now's calendar date in Seoul as YYYY-MM-DD.
func TodayInSeoul(now time.Time) string { return now.In(Seoul).Format(time.DateOnly) }

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

// ParseDate parses a required YYYY-MM-DD date param named field, between
// DateMin and DateMax; errors are *ParamError.
func ParseDate(s, field string) (time.Time, error) {
	if s == "" {
		return time.Time{}, &ParamError{Field: field, Message: "required, format YYYY-MM-DD"}
	}
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return time.Time{}, &ParamError{Field: field, Message: fmt.Sprintf("%s is not a date in the form YYYY-MM-DD", Quote(s))}
	}
	return t, checkDateRange(t, field, s)
}

// ParseMonth parses a required YYYY-MM month param named field, between
// DateMin and DateMax; errors are *ParamError.
func ParseMonth(s, field string) (time.Time, error) {
	if s == "" {
		return time.Time{}, &ParamError{Field: field, Message: "required, format YYYY-MM"}
	}
	t, err := time.Parse("2006-01", s)
	if err != nil {
		return time.Time{}, &ParamError{Field: field, Message: fmt.Sprintf("%s is not a month in the form YYYY-MM", Quote(s))}
	}
	return t, checkDateRange(t, field, s)
}

// ValidateOptionalDate fills an empty date param (params.date) with today
// in Seoul at now(), so that the canonical params always name the day (a
// rerun tomorrow is new work), and checks a given one.
func ValidateOptionalDate(date *string, now func() time.Time) error {
	if *date == "" {
		*date = TodayInSeoul(now())
		return nil
	}
	_, err := ParseDate(*date, "params.date")
	return err
}

var corpCodePattern = regexp.MustCompile(`^[0-9]{8}$`)

// IsCorpCode reports whether s is an 8-digit DART corp code.
func IsCorpCode(s string) bool { return corpCodePattern.MatchString(s) }

package riskmetric

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/buildrisk/radar/queries"
)

// gradeChange returns the notches between corpCode's latest credit grade
// (evaluated on or before day) and its previous grade, or nil when it has
// no earlier evaluation to compare with.
//
// creditEval stores a grade per company and evaluation day, so the row just
// before the latest is usually yesterday's, identical. The previous grade is
// therefore the one in force when the metrics' window of
// RiskFilingDays days began: the newest evaluation on or before
// day − 90, or, for a company first evaluated inside the window, its oldest
// evaluation there. A downgrade is thus reported for the 90 days after it,
// like a risk filing.
func gradeChange(ctx context.Context, db queries.DBTX, corpCode string, day time.Time) (*int32, error) {
	q := queries.New()
	latest, err := q.CreditGradeAsOf(ctx, db, &queries.CreditGradeAsOfParams{CorpCode: corpCode, AsOf: day})
	if err := queries.Interpret(err); err != nil {
		if errors.Is(err, queries.ErrNotFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("error reading the latest grade: %w", err)
	}
	windowStart := day.AddDate(0, 0, -RiskFilingDays)
	previous, err := q.CreditGradeAsOf(ctx, db, &queries.CreditGradeAsOfParams{CorpCode: corpCode, AsOf: windowStart})
	switch err := queries.Interpret(err); {
	case errors.Is(err, queries.ErrNotFound):
		// First evaluated inside the window (so the latest is in it too).
		oldest, err := q.CreditGradeOldestInRange(ctx, db, &queries.CreditGradeOldestInRangeParams{
			CorpCode: corpCode, FromDate: windowStart.AddDate(0, 0, 1), ToDate: day,
		})
		if err != nil {
			return nil, fmt.Errorf("error reading the oldest grade of the window: %w", err)
		}
		previous = &queries.CreditGradeAsOfRow{EvalDate: oldest.EvalDate, Grade: oldest.Grade}
	case err != nil:
		return nil, fmt.Errorf("error reading the previous grade: %w", err)
	}
	if !previous.EvalDate.Before(latest.EvalDate) {
		return nil, nil // a single evaluation: nothing to compare
	}
	return GradeChange(latest.Grade, previous.Grade), nil
}

package fakeupstream

import (
	"cmp"
	"net/http"
	"time"
)

// Paths of the credit rating provider's endpoints.
const (
	pathCreditLookup   = "/credit/v1/grades"
	pathCreditFallback = "/credit/v1/crawl"
)

// creditScale lists the grades from best to worst.
var creditScale = []string{
	"AAA", "AA+", "AA", "AA-", "A+", "A", "A-", "BBB+", "BBB", "BBB-",
	"BB+", "BB", "BB-", "B+", "B", "B-", "CCC", "CC", "C", "D",
}

// Credit model parameters.
const (
	moverShare = 0.10 // companies downgraded on a date between 2025 and 2026
)

// creditError is the provider's refusal body.
type creditError struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// writeCreditKeyError answers a call without a key like the provider
// answers an unknown key: HTTP 401. msg replaces the provider's own message
// when it is not "".
func writeCreditKeyError(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusUnauthorized, creditError{Error: "unauthorized", Message: cmp.Or(msg, "apiKey is missing or not registered")})
}

// creditGrade is a company's grade as of a date.
type creditGrade struct {
	grade, outlook, evaluatedAt string
}

// gradeOf derives corpCode's grade from the seed. Distressed companies have
// speculative grades and a negative outlook. About 10% of companies are
// downgraded 1 to 3 notches on a date between 2025 and 2026: asked with a
// date on or after it (asOf), they answer the lower grade. Without a date
// (zero asOf) the answer is the stable, earlier grade.
func gradeOf(seed int64, corpCode string, distressed bool, asOf time.Time) creditGrade {
	rng := newRand(newHasher(seed).str("credit").str(corpCode))
	rank := 1 + (rng.IntN(12)+rng.IntN(12))/2 // AA+ to BB, mostly around A-/BBB+
	if distressed {
		rank = 12 + rng.IntN(6) // BB- to CC
	}
	outlook := "stable"
	switch u := rng.Float64(); {
	case distressed || (u >= 0.85 && u < 0.95):
		outlook = "negative"
	case u >= 0.75 && u < 0.85:
		outlook = "positive"
	case u >= 0.95:
		outlook = "developing"
	}
	evaluated := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, rng.IntN(366))
	mover := rng.Float64() < moverShare
	changeOn := eventFrom.AddDate(0, 0, rng.IntN(eventDays))
	notches := 1 + rng.IntN(3)
	if mover && !asOf.IsZero() && !asOf.Before(changeOn) {
		rank = min(rank+notches, len(creditScale)-1)
		outlook = "negative"
		evaluated = changeOn
	}
	return creditGrade{grade: creditScale[rank], outlook: outlook, evaluatedAt: evaluated.Format(time.DateOnly)}
}

// creditRequest reads the corpCode and optional date (YYYYMMDD or
// YYYY-MM-DD) of a credit call, answering 400 itself when they are bad.
func creditRequest(w http.ResponseWriter, c *call) (corpCode string, distressed bool, asOf time.Time, ok bool) {
	corpCode = c.q.Get("corpCode")
	if !isDigits(corpCode, 8) {
		writeJSON(w, http.StatusBadRequest, creditError{Error: "invalid_request", Message: "corpCode must be 8 digits"})
		return "", false, time.Time{}, false
	}
	if d := c.q.Get("date"); d != "" {
		var err error
		if asOf, err = time.Parse("20060102", d); err != nil {
			if asOf, err = time.Parse(time.DateOnly, d); err != nil {
				writeJSON(w, http.StatusBadRequest, creditError{Error: "invalid_request", Message: "date must be YYYYMMDD or YYYY-MM-DD"})
				return "", false, time.Time{}, false
			}
		}
	}
	if company, _, found := c.st.u.company(corpCode); found {
		distressed = company.Distressed
	}
	return corpCode, distressed, asOf, true
}

// serveCreditLookup answers the grade lookup. With probability
// Config.EmptyRate (drawn per call) the grade is empty.
func (s *Server) serveCreditLookup(w http.ResponseWriter, c *call) {
	corpCode, distressed, asOf, ok := creditRequest(w, c)
	if !ok {
		return
	}
	type lookup struct {
		CorpCode    string `json:"corpCode"`
		Grade       string `json:"grade"`
		Outlook     string `json:"outlook"`
		EvaluatedAt string `json:"evaluatedAt"`
	}
	if rate := c.st.cfg.EmptyRate; rate > 0 && c.draw("empty") < rate {
		writeJSON(w, http.StatusOK, lookup{CorpCode: corpCode})
		return
	}
	g := gradeOf(c.st.cfg.Seed, corpCode, distressed, asOf)
	writeJSON(w, http.StatusOK, lookup{CorpCode: corpCode, Grade: g.grade, Outlook: g.outlook, EvaluatedAt: g.evaluatedAt})
}

// serveCreditFallback answers the crawl, which always has a grade (the same
// one the lookup has when it is not empty).
func (s *Server) serveCreditFallback(w http.ResponseWriter, c *call) {
	corpCode, distressed, asOf, ok := creditRequest(w, c)
	if !ok {
		return
	}
	g := gradeOf(c.st.cfg.Seed, corpCode, distressed, asOf)
	writeJSON(w, http.StatusOK, struct {
		CorpCode string `json:"corpCode"`
		Grade    string `json:"grade"`
		Source   string `json:"source"`
	}{CorpCode: corpCode, Grade: g.grade, Source: "crawl"})
}

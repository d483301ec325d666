package upstream

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// CreditScale lists the long-term credit grades from best to worst, the
// scale every CREDIT answer uses.
var CreditScale = []string{
	"AAA",
	"AA+", "AA", "AA-",
	"A+", "A", "A-",
	"BBB+", "BBB", "BBB-",
	"BB+", "BB", "BB-",
	"B+", "B", "B-",
	"CCC", "CC", "C",
	"D",
}

// GradeRank returns grade's position in CreditScale (0 for AAA, larger is
// worse), so that downgrades can be measured in notches, or -1 when grade is
// not on the scale.
func GradeRank(grade string) int {
	return slices.Index(CreditScale, grade)
}

// CreditGrade is a company's credit grade as the CREDIT provider reports it.
type CreditGrade struct {
	// CorpCode is the company's DART code.
	CorpCode string

	// Grade is a grade of CreditScale, or "" when the lookup came back
	// empty and the fallback must be asked.
	Grade string

	// Outlook is "stable", "positive", "negative" or "developing"; the
	// fallback does not report one.
	Outlook string

	// Source is where the grade comes from: "" for lookups, "crawl" for the
	// fallback.
	Source string

	// EvaluatedAt is the date of the evaluation, zero when not reported.
	EvaluatedAt time.Time
}

// CreditLookupQuery returns the query (without the API key) of
// EndpointCreditLookup for the company corpCode.
func CreditLookupQuery(corpCode string) url.Values {
	return url.Values{"corpCode": {corpCode}}
}

// CreditFallbackQuery returns the query (without the API key) of
// EndpointCreditFallback for the company corpCode.
func CreditFallbackQuery(corpCode string) url.Values {
	return url.Values{"corpCode": {corpCode}}
}

// creditResponse is the JSON answer of both CREDIT endpoints; Error and
// Message are set on refusals.
type creditResponse struct {
	CorpCode    string `json:"corpCode"`
	Grade       string `json:"grade"`
	Outlook     string `json:"outlook"`
	EvaluatedAt string `json:"evaluatedAt"`
	Source      string `json:"source"`
	Error       string `json:"error"`
	Message     string `json:"message"`
}

// ParseCreditGrade decodes the answer of EndpointCreditLookup or
// EndpointCreditFallback. An empty grade is not an error: it means the
// lookup had nothing and the fallback must be asked. A refusal body
// ({"error":...}, sent with a 4xx status) is returned as an *APIError.
func ParseCreditGrade(body []byte) (CreditGrade, error) {
	var resp creditResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		return CreditGrade{}, fmt.Errorf("credit: decode response: %w", err)
	}
	ep := EndpointCreditLookup
	if resp.Source != "" {
		ep = EndpointCreditFallback
	}
	if resp.Error != "" {
		var kind error
		switch resp.Error {
		case "unauthorized", "forbidden":
			kind = ErrKeyRejected
		case "invalid_request", "not_found":
			kind = ErrInvalidRequest
		case "rate_limited":
			kind = ErrQuotaExceeded
		case "internal":
			kind = ErrProviderFailure
		}
		return CreditGrade{}, &APIError{Endpoint: ep, Code: resp.Error, Message: resp.Message, Kind: kind}
	}
	g := CreditGrade{
		CorpCode: strings.TrimSpace(resp.CorpCode),
		Grade:    strings.ToUpper(strings.TrimSpace(resp.Grade)),
		Outlook:  strings.TrimSpace(resp.Outlook),
		Source:   strings.TrimSpace(resp.Source),
	}
	if g.CorpCode == "" {
		return CreditGrade{}, fmt.Errorf("%s: response has no corpCode", ep)
	}
	if g.Grade != "" && GradeRank(g.Grade) < 0 {
		return CreditGrade{}, fmt.Errorf("%s: corp code %s: unknown grade %s", ep, g.CorpCode, providerValue(g.Grade))
	}
	if s := strings.TrimSpace(resp.EvaluatedAt); s != "" {
		t, err := time.Parse(time.DateOnly, s)
		if err != nil {
			return CreditGrade{}, fmt.Errorf("%s: corp code %s: bad evaluatedAt: %w", ep, g.CorpCode, err)
		}
		g.EvaluatedAt = t
	}
	return g, nil
}

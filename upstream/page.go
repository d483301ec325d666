package upstream

import (
	"context"
	"fmt"
)

// PageAttemptsDefault is how many times FetchPages asks for a page whose
// item count disagrees with the provider's declared total before it gives
// up (the first try included).
const PageAttemptsDefault = 3

// PageLen returns how many items page pageNo (counted from 1) must hold when
// the provider declares total items over all pages of pageSize.
func PageLen(total, pageNo, pageSize int) int {
	return max(0, min(pageSize, total-(pageNo-1)*pageSize))
}

// PageError is a paged listing whose items disagree with the total the
// provider declared: a page shorter (or longer) than the total implies, or
// pages that add up to another number than the last declared total because
// the listing changed while it was read. Accepting either would make the
// job's targets the items it happened to receive instead of the items the
// provider says exist, which is how a short answer would pass as success.
type PageError struct {
	Endpoint Endpoint
	// Key names the listing, as the job's chunk does ("11110:202501").
	Key string
	// Page is the page that disagreed; 0 when the pages disagree together.
	Page int
	// Got is how many items the page (or all pages) held; Want how many the
	// declared Total implies.
	Got, Want, Total int
	// Attempts is how many times the page was asked for.
	Attempts int
}

// Error implements error.
func (e *PageError) Error() string {
	if e.Page == 0 {
		return fmt.Sprintf("%s %s: the pages held %d items but the last one declared %d (the listing changed while it was read)",
			e.Endpoint, e.Key, e.Got, e.Total)
	}
	return fmt.Sprintf("%s %s page %d: %d items where the declared total of %d implies %d, after %d attempts",
		e.Endpoint, e.Key, e.Page, e.Got, e.Total, e.Want, e.Attempts)
}

// FetchPages reads every page of a paged listing and returns its items and
// the total the provider declared. fetch returns one page's items and the
// declared total of the whole listing. A page whose item count is not
// PageLen of the declared total is asked for again, up to attempts times in
// all (below 1 means PageAttemptsDefault); then FetchPages returns a
// *PageError naming the page. It also returns a *PageError when the pages
// add up to another count than the last declared total. Errors of fetch are
// returned as they are.
func FetchPages[T any](ctx context.Context, ep Endpoint, key string, pageSize, attempts int, fetch func(ctx context.Context, pageNo int) ([]T, int, error)) ([]T, int, error) {
	if attempts < 1 {
		attempts = PageAttemptsDefault
	}
	var items []T
	total := 0
	for pageNo := 1; pageNo == 1 || (pageNo-1)*pageSize < total; pageNo++ {
		for attempt := 1; ; attempt++ {
			page, declared, err := fetch(ctx, pageNo)
			if err != nil {
				return nil, 0, err
			}
			if want := PageLen(declared, pageNo, pageSize); len(page) != want {
				if attempt < attempts {
					continue
				}
				return nil, 0, &PageError{Endpoint: ep, Key: key, Page: pageNo, Got: len(page), Want: want, Total: declared, Attempts: attempt}
			}
			items = append(items, page...)
			total = declared
			break
		}
	}
	if len(items) != total {
		return nil, 0, &PageError{Endpoint: ep, Key: key, Got: len(items), Want: total, Total: total}
	}
	return items, total, nil
}

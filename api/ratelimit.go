package api

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// TokenRateLimitDefault is BUILDRISK_TOKEN_RATE_LIMIT's default: requests
// per minute per token, generous for the console's polling and scripts,
// so that only a flood meets it.
const TokenRateLimitDefault = 1200

// rateLimitPolicy is the name of the one policy the RateLimit-Policy and
// RateLimit headers describe.
const rateLimitPolicy = "per-token"

// tokenLimiter gives each token (a viewer's, an operator's) a budget of
// perMinute requests a minute of its own: a token bucket holding a
// minute's budget and refilled at perMinute/60 a second
// (golang.org/x/time/rate). Buckets are keyed by the token's role and
// name, so they are as many as the configured tokens. A nil
// *tokenLimiter limits nothing.
type tokenLimiter struct {
	perMinute int
	now       func() time.Time
	mu        sync.Mutex
	buckets   map[string]*rate.Limiter
}

// newTokenLimiter returns the limiter of perMinute requests per minute per
// token; nil when perMinute is 0 (off).
func newTokenLimiter(perMinute int, now func() time.Time) *tokenLimiter {
	if perMinute <= 0 {
		return nil
	}
	return &tokenLimiter{perMinute: perMinute, now: now, buckets: map[string]*rate.Limiter{}}
}

// take spends one request of key's budget. It returns whether the request
// may go on, the requests left and, for a refused one, how long until one
// is available again; for an allowed one, how long until the budget is
// whole again.
func (l *tokenLimiter) take(key string) (ok bool, left int, wait time.Duration) {
	l.mu.Lock()
	bucket := l.buckets[key]
	if bucket == nil {
		bucket = rate.NewLimiter(rate.Limit(float64(l.perMinute)/60), l.perMinute)
		l.buckets[key] = bucket
	}
	l.mu.Unlock()
	now := l.now()
	r := bucket.ReserveN(now, 1)
	if delay := r.DelayFrom(now); delay > 0 {
		r.CancelAt(now)
		return false, 0, delay
	}
	tokens := bucket.TokensAt(now)
	missing := float64(l.perMinute) - tokens
	return true, int(math.Floor(tokens)), time.Duration(missing / float64(bucket.Limit()) * float64(time.Second))
}

// rateLimited spends one request of c's token's budget and sets the
// RateLimit-Policy and RateLimit headers (IETF draft
// httpapi-ratelimit-headers). Past the budget it answers 429 with
// Retry-After, counts the refusal by role and reports true.
func (s *Server) rateLimited(w http.ResponseWriter, r *http.Request, c *caller) bool {
	if s.tokenLimit == nil {
		return false
	}
	ok, left, wait := s.tokenLimit.take(string(c.role) + ":" + c.name)
	seconds := int(math.Ceil(wait.Seconds()))
	h := w.Header()
	h.Set("RateLimit-Policy", fmt.Sprintf("%q;q=%d;w=60", rateLimitPolicy, s.tokenLimit.perMinute))
	h.Set("RateLimit", fmt.Sprintf("%q;r=%d;t=%d", rateLimitPolicy, left, seconds))
	if ok {
		return false
	}
	s.cfg.Instruments.RateLimited(r.Context(), string(c.role))
	h.Set("Retry-After", strconv.Itoa(seconds))
	writeProblem(w, ProblemRateLimited,
		fmt.Sprintf("this token spent its %d requests a minute (BUILDRISK_TOKEN_RATE_LIMIT); retry after Retry-After seconds", s.tokenLimit.perMinute))
	return true
}

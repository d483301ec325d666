package api

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Limits of failed credential checks per client: after AuthFailuresMax
// wrong bearer tokens or logins within AuthFailureWindow, every credential
// the client sends answers 429 (with Retry-After) until the window ends,
// the right one too, so a guess can no longer be tested. A caller that
// sends no credential is never limited.
const (
	AuthFailuresMax   = 10
	AuthFailureWindow = time.Minute
	// authClientsMax bounds the clients remembered; past it, the ones
	// whose window ended are forgotten.
	authClientsMax = 10000
)

// authLimiter counts failed credential checks per client address.
type authLimiter struct {
	mu      sync.Mutex
	now     func() time.Time
	clients map[string]*authClient
}

type authClient struct {
	start    time.Time
	failures int
}

func newAuthLimiter(now func() time.Time) *authLimiter {
	return &authLimiter{now: now, clients: map[string]*authClient{}}
}

// blocked returns how long client must wait, or 0 when it may try.
func (l *authLimiter) blocked(client string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.clients[client]
	if !ok {
		return 0
	}
	left := c.start.Add(AuthFailureWindow).Sub(l.now())
	if left <= 0 {
		delete(l.clients, client)
		return 0
	}
	if c.failures < AuthFailuresMax {
		return 0
	}
	return left
}

// fail records a failed check of client and reports whether it is the
// first of its window (the one that is logged).
func (l *authLimiter) fail(client string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	c, ok := l.clients[client]
	if ok && now.Sub(c.start) >= AuthFailureWindow {
		ok = false
	}
	if !ok {
		if len(l.clients) >= authClientsMax {
			for k, v := range l.clients {
				if now.Sub(v.start) >= AuthFailureWindow {
					delete(l.clients, k)
				}
			}
		}
		c = &authClient{start: now}
		l.clients[client] = c
	}
	c.failures++
	return c.failures == 1
}

// clientAddr is the address failures are counted by: the peer's IP (behind
// a proxy, the proxy's: put the limit there too).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// refuseLimited answers 429 when r's client is limited and reports whether
// it did.
func (s *Server) refuseLimited(w http.ResponseWriter, r *http.Request, problem bool) bool {
	wait := s.authLimit.blocked(clientAddr(r))
	if wait <= 0 {
		return false
	}
	w.Header().Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
	msg := "too many failed credential checks from this address; retry after Retry-After seconds"
	if problem {
		writeProblem(w, ProblemTooManyAuthFailures, msg)
	} else {
		http.Error(w, msg, http.StatusTooManyRequests)
	}
	return true
}

// authFailed counts and, once per client and window, logs a failed check.
// The guess itself is never logged.
func (s *Server) authFailed(ctx context.Context, r *http.Request, via string) {
	s.cfg.Instruments.AuthFailed(ctx, via)
	client := clientAddr(r)
	if s.authLimit.fail(client) {
		s.cfg.Logger.WarnContext(ctx, "authentication failed", slog.String("client", client), slog.String("via", via),
			slog.String("path", r.URL.Path),
			slog.String("note", "later failures of this client within the window are counted in buildrisk_auth_failures_total, not logged"))
	}
}

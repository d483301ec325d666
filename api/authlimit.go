package api

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/buildrisk/radar/observability"
)

// Limits of failed credential checks. A right credential is never refused:
// behind a proxy every client shares one address, and a limit that refused
// it would let ten wrong tokens a minute lock every client out. A wrong one
// is answered 429 (with Retry-After) instead of 401 once its client failed
// AuthFailuresMax times within AuthFailureWindow, or once all clients
// together failed AuthGlobalFailuresMax times within it, so that rotating
// source addresses buys no more failures. Guessing a token of
// TokenMinLength random characters is hopeless at any rate; the limit
// bounds what failures cost (log lines, audit rows) and makes a burst
// visible. A caller that sends no credential is never limited.
const (
	AuthFailuresMax   = 10
	AuthFailureWindow = time.Minute
	// AuthGlobalFailuresMax bounds the failures of every client together
	// within AuthFailureWindow.
	AuthGlobalFailuresMax = 100
	// authClientsMax bounds the clients remembered; past it, the ones
	// whose window ended are forgotten.
	authClientsMax = 10000
)

// authLimiter counts failed credential checks per client and in all.
type authLimiter struct {
	mu      sync.Mutex
	now     func() time.Time
	clients map[string]*authWindow
	global  authWindow
}

// authWindow counts the failures of a window that started at start.
type authWindow struct {
	start    time.Time
	failures int
}

func newAuthLimiter(now func() time.Time) *authLimiter {
	return &authLimiter{now: now, clients: map[string]*authWindow{}}
}

// limited returns how long a wrong credential of client is answered 429:
// until the end of its window once it has AuthFailuresMax failures, or of
// the global window once that has AuthGlobalFailuresMax; 0 when neither.
func (l *authLimiter) limited(client string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var wait time.Duration
	if left := l.global.start.Add(AuthFailureWindow).Sub(now); left > 0 && l.global.failures >= AuthGlobalFailuresMax {
		wait = left
	}
	if c, ok := l.clients[client]; ok {
		left := c.start.Add(AuthFailureWindow).Sub(now)
		switch {
		case left <= 0:
			delete(l.clients, client)
		case c.failures >= AuthFailuresMax:
			wait = max(wait, left)
		}
	}
	return wait
}

// fail records a failed check of client, in its window and the global one,
// and reports whether it is the first of the client's window (the one that
// is logged).
func (l *authLimiter) fail(client string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Sub(l.global.start) >= AuthFailureWindow {
		l.global = authWindow{start: now}
	}
	l.global.failures++
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
		c = &authWindow{start: now}
		l.clients[client] = c
	}
	c.failures++
	return c.failures == 1
}

// clientAddr returns r's client address: the peer's IP or, when the peer is
// a trusted proxy (Config.TrustedProxies), the address X-Forwarded-For
// names for it. That header is read from the right, each proxy having
// appended the address it received the request from: the first address
// that is not itself a trusted proxy is the client. A malformed entry ends
// the walk at the last address read (a trusted proxy, which then stands for
// the client); so does an X-Forwarded-For from anyone else, which is never
// believed.
func (s *Server) clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil || !s.trustedProxy(peer) {
		return NormalizeClientAddr(host)
	}
	client := peer.WithZone("").Unmap()
	entries := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(entries) - 1; i >= 0; i-- {
		addr, ok := parseForwarded(entries[i])
		if !ok {
			break
		}
		client = addr
		if !s.trustedProxy(addr) {
			break
		}
	}
	return client.String()
}

// parseForwarded parses one X-Forwarded-For entry: an IP address, maybe
// with a port (IPv6 then in brackets). A zone is dropped: it names an
// interface of the sender, not the client, and may be of any length.
func parseForwarded(entry string) (netip.Addr, bool) {
	entry = strings.TrimSpace(entry)
	if addr, err := netip.ParseAddr(entry); err == nil {
		return addr.WithZone("").Unmap(), true
	}
	if addrPort, err := netip.ParseAddrPort(entry); err == nil {
		return addrPort.Addr().WithZone("").Unmap(), true
	}
	return netip.Addr{}, false
}

// trustedProxy reports whether addr is one of Config.TrustedProxies.
func (s *Server) trustedProxy(addr netip.Addr) bool {
	addr = addr.Unmap()
	for _, p := range s.cfg.TrustedProxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// limitKey is what failures are counted by: r's client address (see
// clientAddr), an IPv6 client by its /64, which one host usually holds
// whole.
func limitKey(r *http.Request) string {
	client := clientFrom(r.Context())
	addr, err := netip.ParseAddr(client)
	if err != nil || !addr.Is6() || addr.Is4In6() {
		return client
	}
	return netip.PrefixFrom(addr, 64).Masked().String()
}

// refuseLimited answers 429 when r's client is limited (see limited) and
// reports whether it did. Call it only after r's credential was found
// wrong: a right one is never refused.
func (s *Server) refuseLimited(w http.ResponseWriter, r *http.Request, problem bool) bool {
	wait := s.authLimit.limited(limitKey(r))
	if wait <= 0 {
		return false
	}
	w.Header().Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
	msg := "too many failed credential checks; retry after Retry-After seconds"
	if problem {
		writeProblem(w, ProblemTooManyAuthFailures, msg)
	} else {
		http.Error(w, msg, http.StatusTooManyRequests)
	}
	return true
}

// authFailed handles a wrong credential: it is counted (via names how it
// came: bearer or login), and answered 429 when its client is limited, which
// authFailed reports. Otherwise the failure counts towards the limits and,
// once per client and window, is logged (and, for a bearer token, audited):
// the caller answers 401. The guess itself is never logged.
func (s *Server) authFailed(w http.ResponseWriter, r *http.Request, via string, problem bool) (refused bool) {
	ctx := r.Context()
	s.cfg.Instruments.AuthFailed(ctx, via)
	if s.refuseLimited(w, r, problem) {
		return true
	}
	if s.authLimit.fail(limitKey(r)) {
		s.logAuthFailure(ctx, r, via)
		if via == observability.AuthViaBearer {
			// A failed login is audited each time; a refused bearer token
			// once per client and window: past AuthGlobalFailuresMax
			// failures a window, every wrong credential is limited before
			// it gets here, so a flood adds a bounded number of rows.
			s.audit(ctx, "anonymous", AuditTokenRefused, "",
				"a wrong bearer token; further ones from this client within the minute are counted in buildrisk_auth_failures_total")
		}
	}
	return false
}

// logAuthFailure logs the first failure of a client's window.
func (s *Server) logAuthFailure(ctx context.Context, r *http.Request, via string) {
	s.cfg.Logger.WarnContext(ctx, "authentication failed", slog.String("client", clientFrom(ctx)), slog.String("via", via),
		slog.String("path", r.URL.Path),
		slog.String("note", "later failures of this client within the window are counted in buildrisk_auth_failures_total, not logged"))
}

// MaxClientAddrLen is the longest client address recorded.
const MaxClientAddrLen = 64

// NormalizeClientAddr returns a client address as the audit trail, the
// logs and the limits record it: an IP address (s may carry a port) in
// its canonical form, without a zone (which a client may make any length)
// and IPv4-mapped addresses as IPv4; anything else cut to
// MaxClientAddrLen bytes.
func NormalizeClientAddr(s string) string {
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	if addr, err := netip.ParseAddr(s); err == nil {
		return addr.WithZone("").Unmap().String()
	}
	return strings.ToValidUTF8(s[:min(len(s), MaxClientAddrLen)], "")
}

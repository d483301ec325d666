package api

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/buildrisk/radar/catalog"
)

// NormalizeHost returns host (a Host header or an entry of
// Config.AllowedHosts) as the allow-list compares it: without its port,
// brackets or trailing dot, lower-cased, and an IP address in its
// canonical form (an IPv4-mapped IPv6 address as IPv4).
func NormalizeHost(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if addr, err := netip.ParseAddr(host); err == nil {
		return addr.Unmap().String()
	}
	return host
}

// probePaths answer whatever the Host: the orchestrator's probes name the
// pod by its address.
var probePaths = map[string]bool{"/healthz": true, "/readyz": true}

// checkHost answers 421 (Misdirected Request) to a request whose Host is
// not one of Config.AllowedHosts, before anything else looks at it; with no
// allow-list every Host passes. It is what stops DNS rebinding: a page of
// attacker.example whose name the attacker then points at the api sends
// Host and Origin both attacker.example, which the cross-origin check takes
// for a same-origin request. With authentication that page has no
// credential to send; without it (Config.Insecure) the allow-list is the
// guard. The probes are not checked.
func (s *Server) checkHost(next http.Handler) http.Handler {
	if len(s.cfg.AllowedHosts) == 0 {
		return next
	}
	allowed := make(map[string]bool, len(s.cfg.AllowedHosts))
	for _, h := range s.cfg.AllowedHosts {
		allowed[NormalizeHost(h)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if allowed[NormalizeHost(r.Host)] || probePaths[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			// Not read: the connection closes instead.
			w.Header().Set("Connection", "close")
		}
		writeProblem(w, ProblemMisdirectedRequest, fmt.Sprintf("this api does not answer for host %s (BUILDRISK_ALLOWED_HOSTS)", catalog.Quote(r.Host)))
	})
}

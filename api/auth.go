package api

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Role is what a token may do.
type Role string

// Roles: a viewer reads, an operator also requests, stops and abandons.
const (
	RoleViewer   Role = "viewer"
	RoleOperator Role = "operator"
)

// ParseTokens parses BUILDRISK_API_TOKENS (or the content of
// BUILDRISK_API_TOKENS_FILE): role:TOKEN entries separated by commas or
// newlines; blank lines and lines starting with # are ignored. A role may
// have several tokens, which is how tokens are rotated without downtime:
// add the new one, move clients over, remove the old one. A token given
// twice with different roles is refused.
func ParseTokens(s string) (map[string]Role, error) {
	tokens := map[string]Role{}
	var entries []string
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		entries = append(entries, strings.Split(line, ",")...)
	}
	n := 0
	for _, part := range entries {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n++
		role, token, ok := strings.Cut(part, ":")
		if !ok || strings.TrimSpace(token) == "" {
			return nil, fmt.Errorf("entry %d is not role:TOKEN", n)
		}
		token = strings.TrimSpace(token)
		switch Role(role) {
		case RoleViewer, RoleOperator:
		default:
			return nil, fmt.Errorf("entry %d has unknown role %q (viewer or operator)", n, role)
		}
		if prev, ok := tokens[token]; ok && prev != Role(role) {
			return nil, fmt.Errorf("entry %d gives a token of %s to %s too", n, prev, role)
		}
		tokens[token] = Role(role)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("no tokens given")
	}
	return tokens, nil
}

// riverUIPrefix is where River UI is mounted when configured.
const riverUIPrefix = "/riverui"

// caller is who sent a request: a bearer token or a console session.
type caller struct {
	role Role
	// session is set when the caller was identified by the session cookie;
	// nil for a bearer token.
	session *session
}

// identify returns the request's caller. An Authorization header decides
// alone (a wrong token is refused even with a valid cookie), so bearer
// clients behave exactly as before the console existed.
func (s *Server) identify(r *http.Request) (*caller, bool) {
	if header := r.Header.Get("Authorization"); header != "" {
		token, ok := bearerToken(header)
		role, known := s.lookupToken(token)
		if !ok || !known {
			return nil, false
		}
		return &caller{role: role}, true
	}
	if sess, ok := s.sessionFrom(r); ok {
		return &caller{role: sess.Role, session: sess}, true
	}
	return nil, false
}

// authenticate guards /v1 and River UI. /v1: GETs need a viewer or an
// operator, anything else an operator. River UI: operators only, whatever
// the method. Health, metrics, the OpenAPI docs and the console's own pages
// (which check their session themselves) are open.
//
// A call authenticated by the session cookie is one a browser may send on
// its own, so an unsafe method must also prove it comes from the console:
//   - the request must not be cross-origin by the browser's own account
//     (http.CrossOriginProtection: Sec-Fetch-Site, else Origin vs Host);
//   - a /v1 call must carry the session's CSRF token in X-CSRF-Token, which
//     only a page served to this session can know.
//
// SameSite=Strict alone is not enough: "same site" is not "same origin"
// (a page on a sibling host of the same registrable domain, or an HTTP page
// on the same host, is same-site and its requests carry the cookie), and
// browsers that ignore SameSite still exist. River UI's own pages cannot
// send the token; for them the cross-origin check stands in, which every
// browser that sends the cookie with SameSite semantics also supports.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path
		// A refusal of a request with a body closes the connection: the
		// server would otherwise read (and discard) up to 256 KiB of an
		// anonymous body before sending the 401. Removed once let through.
		hasBody := r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
		if hasBody {
			w.Header().Set("Connection", "close")
		}
		switch {
		case s.cfg.Insecure:
			// No tokens, but a browser on another site still cannot act
			// through a user's trusted network.
			if !isReadOnly(r) {
				if err := s.crossOrigin.Check(r); err != nil {
					writeProblem(w, http.StatusForbidden, "cross-origin request refused")
					return
				}
			}
			r = markAuthenticated(r)
		case strings.HasPrefix(path, "/v1/"):
			if !s.authorizeAPI(w, r) {
				return
			}
			r = markAuthenticated(r)
		case path == riverUIPrefix || strings.HasPrefix(path, riverUIPrefix+"/"):
			if !s.authorizeRiverUI(w, r) {
				return
			}
			r = markAuthenticated(r)
		}
		if hasBody {
			w.Header().Del("Connection")
		}
		next.ServeHTTP(w, r)
	})
}

// authenticatedKey marks a request's context once authenticate let it
// through as a known caller (or auth is off).
type authenticatedKey struct{}

func markAuthenticated(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), authenticatedKey{}, true))
}

// authenticated reports whether authenticate let r through as a known
// caller: only then may limitBody buffer its body.
func authenticated(r *http.Request) bool {
	ok, _ := r.Context().Value(authenticatedKey{}).(bool)
	return ok
}

func (s *Server) authorizeAPI(w http.ResponseWriter, r *http.Request) bool {
	c, ok := s.identify(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="buildrisk-radar"`)
		writeProblem(w, http.StatusUnauthorized, "a valid bearer token is required (Authorization: Bearer TOKEN)")
		return false
	}
	readOnly := isReadOnly(r)
	if !readOnly && c.role != RoleOperator {
		writeProblem(w, http.StatusForbidden, fmt.Sprintf("%s requires an operator token; this token is %s", r.Method, c.role))
		return false
	}
	if c.session != nil && !readOnly {
		if err := s.crossOrigin.Check(r); err != nil {
			writeProblem(w, http.StatusForbidden, "cross-origin request refused")
			return false
		}
		if !s.sessions.checkCSRF(c.session, r.Header.Get(csrfHeader)) {
			writeProblem(w, http.StatusForbidden, "missing or wrong "+csrfHeader+" header; reload the console")
			return false
		}
	}
	return true
}

func (s *Server) authorizeRiverUI(w http.ResponseWriter, r *http.Request) bool {
	c, ok := s.identify(r)
	switch {
	case !ok && r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html"):
		// A browser: send it to the login page and back.
		http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		return false
	case !ok:
		w.Header().Set("WWW-Authenticate", `Bearer realm="buildrisk-radar"`)
		writeProblem(w, http.StatusUnauthorized, "River UI needs an operator: log in to the console or send an operator bearer token")
		return false
	case c.role != RoleOperator:
		writeProblem(w, http.StatusForbidden, "River UI needs an operator; this login is "+string(c.role))
		return false
	}
	if c.session != nil && !isReadOnly(r) {
		if err := s.crossOrigin.Check(r); err != nil {
			writeProblem(w, http.StatusForbidden, "cross-origin request refused")
			return false
		}
	}
	return true
}

func isReadOnly(r *http.Request) bool {
	return r.Method == http.MethodGet || r.Method == http.MethodHead
}

// bearerToken returns the token of an "Authorization: Bearer TOKEN" header.
// The scheme is matched case-insensitively (RFC 9110 §11.1).
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// lookupToken compares in constant time so tokens cannot be guessed by timing.
func (s *Server) lookupToken(token string) (Role, bool) {
	if token == "" {
		return "", false
	}
	var found Role
	for candidate, role := range s.cfg.Tokens {
		if subtle.ConstantTimeCompare([]byte(candidate), []byte(token)) == 1 {
			found = role
		}
	}
	return found, found != ""
}

func writeProblem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"title": http.StatusText(status), "status": status, "detail": detail,
	})
}

package api

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/buildrisk/radar/observability"
)

// Role is what a token may do.
type Role string

// Roles: a viewer reads, an operator also requests, stops and abandons.
const (
	RoleViewer   Role = "viewer"
	RoleOperator Role = "operator"
)

// TokenMinLength is the shortest token ParseTokens accepts: 32 characters
// (`radar dev` makes 32 hex digits, `openssl rand -hex 24` 48).
const TokenMinLength = 32

// tokenNamePattern is what a token's name may be.
var tokenNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$`)

// ParseTokens parses BUILDRISK_API_TOKENS (or the content of
// BUILDRISK_API_TOKENS_FILE): role:name:TOKEN or role:TOKEN entries
// separated by commas or newlines; blank lines and lines starting with #
// are ignored. It returns each token's role and name: the name is what a
// request's requested_by and the logs record, never the token; without
// one, it is the token's fingerprint (fp- and 8 hex digits of its SHA-256).
// A token shorter than TokenMinLength is refused. A role may have several
// tokens, which is how tokens are rotated without downtime: add the new
// one, move clients over, remove the old one. A token given twice with
// different roles is refused. No error quotes a token.
func ParseTokens(s string) (map[string]Role, map[string]string, error) {
	tokens, names := map[string]Role{}, map[string]string{}
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
		role, rest, ok := strings.Cut(part, ":")
		if !ok || strings.TrimSpace(rest) == "" {
			return nil, nil, fmt.Errorf("entry %d is not role:name:TOKEN or role:TOKEN", n)
		}
		switch Role(role) {
		case RoleViewer, RoleOperator:
		default:
			return nil, nil, fmt.Errorf("entry %d has unknown role %q (viewer or operator)", n, role)
		}
		token, name := strings.TrimSpace(rest), ""
		if before, after, ok := strings.Cut(rest, ":"); ok && len(strings.TrimSpace(after)) >= TokenMinLength && len(before) < TokenMinLength {
			name, token = strings.TrimSpace(before), strings.TrimSpace(after)
			if !tokenNamePattern.MatchString(name) {
				return nil, nil, fmt.Errorf("entry %d: a token's name is letters, digits and _ . @ - (at most 64)", n)
			}
		}
		if len(token) < TokenMinLength {
			return nil, nil, fmt.Errorf("entry %d: a token must be at least %d characters (this one has %d); make one with `openssl rand -hex 24`", n, TokenMinLength, len(token))
		}
		if name == "" {
			name = tokenFingerprint(token)
		}
		if prev, ok := tokens[token]; ok && prev != Role(role) {
			return nil, nil, fmt.Errorf("entry %d gives a token of %s to %s too", n, prev, role)
		}
		tokens[token], names[token] = Role(role), name
	}
	if len(tokens) == 0 {
		return nil, nil, fmt.Errorf("no tokens given")
	}
	return tokens, names, nil
}

// tokenFingerprint names a token that was given no name.
func tokenFingerprint(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "fp-" + hex.EncodeToString(sum[:4])
}

// riverUIPrefix is where River UI is mounted when configured.
const riverUIPrefix = "/riverui"

// caller is who sent a request: a bearer token or a console session.
type caller struct {
	role Role
	// name is the token's name (ParseTokens), also for a session.
	name string
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
		role, name, known := s.lookupToken(token)
		if !ok || !known {
			return nil, false
		}
		return &caller{role: role, name: name}, true
	}
	if sess, ok := s.sessionFrom(r); ok {
		return &caller{role: sess.Role, name: sess.Name, session: sess}, true
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
					writeProblem(w, ProblemForbidden, "cross-origin request refused")
					return
				}
			}
			r = markAuthenticated(r, nil)
		case strings.HasPrefix(path, "/v1/"):
			c, ok := s.authorizeAPI(w, r)
			if !ok {
				return
			}
			r = markAuthenticated(r, c)
		case path == riverUIPrefix || strings.HasPrefix(path, riverUIPrefix+"/"):
			c, ok := s.authorizeRiverUI(w, r)
			if !ok {
				return
			}
			r = markAuthenticated(r, c)
		}
		if hasBody {
			w.Header().Del("Connection")
		}
		next.ServeHTTP(w, r)
	})
}

// authenticatedKey marks a request's context once authenticate let it
// through, with its caller (nil when auth is off).
type authenticatedKey struct{}

func markAuthenticated(r *http.Request, c *caller) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), authenticatedKey{}, c))
}

// authenticated reports whether authenticate let r through as a known
// caller: only then may limitBody buffer its body.
func authenticated(r *http.Request) bool {
	_, ok := r.Context().Value(authenticatedKey{}).(*caller)
	return ok
}

// callerName is the token name of ctx's caller, for requested_by; "api"
// when auth is off.
func callerName(ctx context.Context) string {
	if c, _ := ctx.Value(authenticatedKey{}).(*caller); c != nil && c.name != "" {
		return c.name
	}
	return "api"
}

// identifyLimited is identify under the limits of failed checks: a right
// credential is never refused; a wrong bearer token counts as a failure,
// and is answered 429 (refused) when its client is limited (authFailed).
func (s *Server) identifyLimited(w http.ResponseWriter, r *http.Request) (*caller, bool, bool) {
	c, ok := s.identify(r)
	if !ok && r.Header.Get("Authorization") != "" && s.authFailed(w, r, observability.AuthViaBearer, true) {
		return nil, false, true
	}
	return c, ok, false
}

func (s *Server) authorizeAPI(w http.ResponseWriter, r *http.Request) (*caller, bool) {
	c, ok, refused := s.identifyLimited(w, r)
	if refused {
		return nil, false
	}
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="buildrisk-radar"`)
		writeProblem(w, ProblemUnauthorized, "a valid bearer token is required (Authorization: Bearer TOKEN)")
		return nil, false
	}
	if s.rateLimited(w, r, c) {
		return nil, false
	}
	readOnly := isReadOnly(r)
	if !readOnly && c.role != RoleOperator {
		writeProblem(w, ProblemForbidden, fmt.Sprintf("%s requires an operator token; this token is %s", r.Method, c.role))
		return nil, false
	}
	if c.session != nil && !readOnly {
		if err := s.crossOrigin.Check(r); err != nil {
			writeProblem(w, ProblemForbidden, "cross-origin request refused")
			return nil, false
		}
		if !s.sessions.checkCSRF(c.session, r.Header.Get(csrfHeader)) {
			writeProblem(w, ProblemForbidden, "missing or wrong "+csrfHeader+" header; reload the console")
			return nil, false
		}
	}
	return c, true
}

func (s *Server) authorizeRiverUI(w http.ResponseWriter, r *http.Request) (*caller, bool) {
	c, ok, refused := s.identifyLimited(w, r)
	if refused {
		return nil, false
	}
	switch {
	case !ok && r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html"):
		// A browser: send it to the login page and back.
		http.Redirect(w, r, "/login?next="+url.QueryEscape(boundedNext(r.URL.RequestURI())), http.StatusSeeOther)
		return nil, false
	case !ok:
		w.Header().Set("WWW-Authenticate", `Bearer realm="buildrisk-radar"`)
		writeProblem(w, ProblemUnauthorized, "River UI needs an operator: log in to the console or send an operator bearer token")
		return nil, false
	case c.role != RoleOperator:
		writeProblem(w, ProblemForbidden, "River UI needs an operator; this login is "+string(c.role))
		return nil, false
	}
	if c.session != nil && !isReadOnly(r) {
		if err := s.crossOrigin.Check(r); err != nil {
			writeProblem(w, ProblemForbidden, "cross-origin request refused")
			return nil, false
		}
	}
	return c, true
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

// lookupToken compares in constant time so tokens cannot be guessed by
// timing, and returns the token's role and name.
func (s *Server) lookupToken(token string) (Role, string, bool) {
	if token == "" {
		return "", "", false
	}
	var found Role
	var name string
	for candidate, role := range s.cfg.Tokens {
		if subtle.ConstantTimeCompare([]byte(candidate), []byte(token)) == 1 {
			found = role
			name = cmp.Or(s.cfg.TokenNames[candidate], tokenFingerprint(candidate))
		}
	}
	return found, name, found != ""
}

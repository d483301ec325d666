package api

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
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

// authenticate guards /v1: GETs need a viewer or operator token, anything
// else an operator token. Health, metrics and the OpenAPI docs are open.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Insecure || !strings.HasPrefix(r.URL.Path, "/v1/") {
			next.ServeHTTP(w, r)
			return
		}
		token, ok := bearerToken(r.Header.Get("Authorization"))
		role, known := s.lookupToken(token)
		if !ok || !known {
			w.Header().Set("WWW-Authenticate", `Bearer realm="buildrisk-radar"`)
			writeProblem(w, http.StatusUnauthorized, "a valid bearer token is required (Authorization: Bearer TOKEN)")
			return
		}
		readOnly := r.Method == http.MethodGet || r.Method == http.MethodHead
		if !readOnly && role != RoleOperator {
			writeProblem(w, http.StatusForbidden, fmt.Sprintf("%s requires an operator token; this token is %s", r.Method, role))
			return
		}
		next.ServeHTTP(w, r)
	})
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

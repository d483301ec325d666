package api

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/buildrisk/radar/queries"
)

// Console sessions.
//
// Logging in to the console with an API token sets a session cookie instead
// of keeping the token in the browser. The cookie is signed, not stored:
// its value is the role, an expiry and a random session id, followed by an
// HMAC-SHA256 of those. The HMAC key is derived from the session key
// (BUILDRISK_SESSION_KEY) and the configured tokens (see newSessionSigner),
// so
//   - every api replica configured with the same tokens accepts the
//     cookies the others set: the api stays stateless behind a load
//     balancer, with no session table and no shared secret to distribute;
//   - changing BUILDRISK_API_TOKENS (revoking a token) signs every session
//     out at once, because the key changes with them;
//   - a cookie cannot be forged, nor a token guessed from one, without the
//     session key.
//
// The signature alone no longer makes a session: each login is also a row
// of console_session (the SHA-256 of its id, its role, its expiry), checked
// on every request whose cookie's signature holds. Logout revokes the row,
// so a copied cookie is useless after it; "sign out everywhere" revokes
// every row. The expiry is capped on the server twice: the row's
// expires_at (the database's clock), and a cookie claiming to last longer
// than SessionTTL from now is refused even with a valid signature.

// SessionCookieName is the console's session cookie over plain HTTP (a
// laptop, a trusted network).
const SessionCookieName = "radar_session"

// SessionCookieNameTLS is the session cookie over TLS (directly or behind a
// proxy that says X-Forwarded-Proto: https): the __Host- prefix makes the
// browser accept it only Secure, for Path=/ and without a Domain, so a
// sibling host cannot plant one. Over TLS only this name is read.
const SessionCookieNameTLS = "__Host-radar_session"

// sessionCookieName is the cookie name for r.
func sessionCookieName(r *http.Request) string {
	if servedOverTLS(r) {
		return SessionCookieNameTLS
	}
	return SessionCookieName
}

// SessionTTL is how long a console login lasts.
const SessionTTL = 12 * time.Hour

// csrfHeader carries the session's CSRF token on the console's POSTs.
const csrfHeader = "X-CSRF-Token"

// session is one console login.
type session struct {
	Role    Role
	Expires time.Time
	// ID is random per login; the CSRF token is derived from it.
	ID string
	// Name is the name of the token the session was opened with, from its
	// console_session row (not in the cookie).
	Name string
}

// sessionSigner signs and checks session cookies.
type sessionSigner struct {
	// keys are the signing keys: the first signs, any one verifies.
	keys [][]byte
	now  func() time.Time
}

// newSessionSigner derives the signing key from the session key
// (BUILDRISK_SESSION_KEY, a secret of its own) and the configured tokens:
// replicas with the same key and tokens accept each other's cookies,
// changing the tokens (revoking one) signs every session out, and knowing
// the tokens is not enough to sign or check a cookie or a CSRF token, so a
// viewer cannot test guesses of the operator token offline from its own
// cookie. Without a session key it uses a random one: sessions then end
// when the process restarts and another replica does not accept them.
// Several comma-separated keys rotate it: the first signs, every one is
// accepted (new,old during a rolling restart, then new alone).
func newSessionSigner(sessionKey []byte, tokens map[string]Role, now func() time.Time) *sessionSigner {
	entries := make([]string, 0, len(tokens))
	for token, role := range tokens {
		entries = append(entries, string(role)+":"+token)
	}
	slices.Sort(entries)
	var secrets [][]byte
	for _, k := range bytes.Split(sessionKey, []byte(",")) {
		if k = bytes.TrimSpace(k); len(k) > 0 {
			secrets = append(secrets, k)
		}
	}
	if len(secrets) == 0 {
		random := make([]byte, 32)
		_, _ = rand.Read(random)
		secrets = [][]byte{random}
	}
	signer := &sessionSigner{now: now}
	for _, secret := range secrets {
		h := hmac.New(sha256.New, secret)
		h.Write([]byte("buildrisk-radar console session v2\x00"))
		for _, e := range entries {
			h.Write([]byte(e))
			h.Write([]byte{0})
		}
		signer.keys = append(signer.keys, h.Sum(nil))
	}
	return signer
}

// newSession starts a session for role.
func (s *sessionSigner) newSession(role Role) *session {
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	return &session{Role: role, Expires: s.now().Add(SessionTTL).Truncate(time.Second), ID: hex.EncodeToString(id)}
}

// encode returns the cookie value of sess.
func (s *sessionSigner) encode(sess *session) string {
	payload := strings.Join([]string{"v1", string(sess.Role), strconv.FormatInt(sess.Expires.Unix(), 10), sess.ID}, "|")
	enc := base64.RawURLEncoding.EncodeToString([]byte(payload))
	return enc + "." + base64.RawURLEncoding.EncodeToString(s.mac("cookie", payload))
}

// decode checks a cookie value's signature and expiry.
func (s *sessionSigner) decode(value string) (*session, bool) {
	encPayload, encMAC, ok := strings.Cut(value, ".")
	if !ok {
		return nil, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(encPayload)
	if err != nil {
		return nil, false
	}
	mac, err := base64.RawURLEncoding.DecodeString(encMAC)
	if err != nil || !s.verify(mac, "cookie", string(payload)) {
		return nil, false
	}
	parts := strings.Split(string(payload), "|")
	if len(parts) != 4 || parts[0] != "v1" {
		return nil, false
	}
	role := Role(parts[1])
	if role != RoleViewer && role != RoleOperator {
		return nil, false
	}
	unix, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return nil, false
	}
	sess := &session{Role: role, Expires: time.Unix(unix, 0), ID: parts[3]}
	if now := s.now(); !now.Before(sess.Expires) || sess.Expires.After(now.Add(SessionTTL)) {
		return nil, false
	}
	return sess, true
}

// csrfToken is the session's CSRF token: the page embeds it and its script
// sends it in X-CSRF-Token; a page on another origin can read neither the
// cookie nor the page, so it cannot send the token.
func (s *sessionSigner) csrfToken(sess *session) string {
	return base64.RawURLEncoding.EncodeToString(s.mac("csrf", sess.ID))
}

// checkCSRF reports whether token is sess's CSRF token under any key.
func (s *sessionSigner) checkCSRF(sess *session, token string) bool {
	if token == "" {
		return false
	}
	mac, err := base64.RawURLEncoding.DecodeString(token)
	return err == nil && s.verify(mac, "csrf", sess.ID)
}

// verify reports whether mac is msg's under any of the keys.
func (s *sessionSigner) verify(mac []byte, purpose, msg string) bool {
	ok := false
	for _, key := range s.keys {
		if hmac.Equal(mac, macWith(key, purpose, msg)) {
			ok = true
		}
	}
	return ok
}

// mac signs with the first key.
func (s *sessionSigner) mac(purpose, msg string) []byte { return macWith(s.keys[0], purpose, msg) }

func macWith(key []byte, purpose, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(purpose))
	h.Write([]byte{0})
	h.Write([]byte(msg))
	return h.Sum(nil)
}

// sessionFrom returns the request's console session, if it carries a valid
// one: a signed cookie whose session the server has not ended. A database
// error counts as no session (logged): the caller logs in again.
func (s *Server) sessionFrom(r *http.Request) (*session, bool) {
	c, err := r.Cookie(sessionCookieName(r))
	if err != nil {
		return nil, false
	}
	sess, ok := s.sessions.decode(c.Value)
	if !ok {
		return nil, false
	}
	row, err := s.queries.ConsoleSessionGetActive(r.Context(), s.pool, sessionIDHash(sess.ID))
	if err != nil {
		if err := queries.Interpret(err); !errors.Is(err, queries.ErrNotFound) {
			s.cfg.Logger.Warn("error checking a console session", "error", err.Error())
		}
		return nil, false
	}
	if Role(row.Role) != sess.Role {
		return nil, false
	}
	sess.Name = row.TokenName
	return sess, true
}

// sessionIDHash is how console_session stores a session id.
func sessionIDHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// startSession records a new session for role and returns it.
func (s *Server) startSession(ctx context.Context, role Role, name string) (*session, error) {
	sess := s.sessions.newSession(role)
	sess.Name = name
	if _, err := s.queries.ConsoleSessionDeleteExpired(ctx, s.pool); err != nil {
		return nil, fmt.Errorf("error forgetting ended sessions: %w", err)
	}
	err := s.queries.ConsoleSessionInsert(ctx, s.pool, &queries.ConsoleSessionInsertParams{
		IDHash: sessionIDHash(sess.ID), Role: string(role), TokenName: name, ExpiresAt: sess.Expires,
	})
	if err != nil {
		return nil, fmt.Errorf("error recording a session: %w", err)
	}
	return sess, nil
}

// endSessions revokes sess or, when everywhere is set, every session an
// operator may end: an operator's "sign out everywhere" ends every console
// session (a suspected leak), a viewer's only those opened with its own
// token, since a viewer may not act on anyone else.
func (s *Server) endSessions(ctx context.Context, sess *session, everywhere bool) error {
	var err error
	switch {
	case everywhere && sess.Role == RoleOperator:
		_, err = s.queries.ConsoleSessionRevokeAll(ctx, s.pool)
	case everywhere:
		_, err = s.queries.ConsoleSessionRevokeOwn(ctx, s.pool, &queries.ConsoleSessionRevokeOwnParams{TokenName: sess.Name, Role: string(sess.Role)})
	default:
		_, err = s.queries.ConsoleSessionRevoke(ctx, s.pool, sessionIDHash(sess.ID))
	}
	return err
}

// setSessionCookie sets the session cookie: HttpOnly (scripts cannot read
// it), SameSite=Strict (no other site's page sends it), and Secure when the
// request came over TLS, directly or through a proxy that says so.
func setSessionCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name:     sessionCookieName(r),
		Value:    value,
		Path:     "/",
		MaxAge:   maxAge,
		HttpOnly: true,
		Secure:   servedOverTLS(r),
		SameSite: http.SameSiteStrictMode,
	})
}

func servedOverTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

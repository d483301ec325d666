package api

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSessionSigner(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	tokens := map[string]Role{"op": RoleOperator, "view": RoleViewer}
	key := []byte("a-session-key-of-at-least-32-characters")
	signer := newSessionSigner(key, tokens, clock)

	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		sess := signer.newSession(RoleOperator)
		got, ok := signer.decode(signer.encode(sess))
		require.True(t, ok)
		require.Equal(t, sess.Role, got.Role)
		require.Equal(t, sess.ID, got.ID)
		require.True(t, sess.Expires.Equal(got.Expires))
		require.Len(t, sess.ID, 32, "16 random bytes")
		require.NotEqual(t, sess.ID, signer.newSession(RoleOperator).ID)
	})

	t.Run("SameTokensSameKey", func(t *testing.T) {
		t.Parallel()
		// Another replica with the same tokens accepts the cookie.
		other := newSessionSigner(key, map[string]Role{"view": RoleViewer, "op": RoleOperator}, clock)
		_, ok := other.decode(signer.encode(signer.newSession(RoleViewer)))
		require.True(t, ok)
	})

	t.Run("ChangedTokensSignOut", func(t *testing.T) {
		t.Parallel()
		rotated := newSessionSigner(key, map[string]Role{"op2": RoleOperator, "view": RoleViewer}, clock)
		_, ok := rotated.decode(signer.encode(signer.newSession(RoleOperator)))
		require.False(t, ok)
		// A role change of the same token changes the key too.
		demoted := newSessionSigner(key, map[string]Role{"op": RoleViewer, "view": RoleViewer}, clock)
		_, ok = demoted.decode(signer.encode(signer.newSession(RoleOperator)))
		require.False(t, ok)
	})

	t.Run("NoKeyRandomKey", func(t *testing.T) {
		t.Parallel()
		a, b := newSessionSigner(nil, tokens, clock), newSessionSigner(nil, tokens, clock)
		_, ok := b.decode(a.encode(a.newSession(RoleOperator)))
		require.False(t, ok)
	})

	t.Run("KeyRotation", func(t *testing.T) {
		t.Parallel()
		// BUILDRISK_SESSION_KEY=new,old: new cookies and CSRF tokens are
		// signed with the new key, the old key's still pass until it is
		// removed, so a rolling restart signs nobody out.
		newKey := []byte("the-next-session-key-of-32-characters")
		rotated := newSessionSigner(append(append([]byte{}, newKey...), append([]byte(","), key...)...), tokens, clock)
		old := signer.newSession(RoleOperator)
		got, ok := rotated.decode(signer.encode(old))
		require.True(t, ok, "a cookie of the old key still works")
		require.True(t, rotated.checkCSRF(got, signer.csrfToken(old)), "so does a page rendered with it")
		fresh := rotated.newSession(RoleViewer)
		_, ok = newSessionSigner(newKey, tokens, clock).decode(rotated.encode(fresh))
		require.True(t, ok, "new cookies are signed with the first key")
		_, ok = signer.decode(rotated.encode(fresh))
		require.False(t, ok)
	})

	t.Run("TokensAloneDoNotMakeTheKey", func(t *testing.T) {
		t.Parallel()
		// Knowing every token (or guessing them from one's own cookie and
		// CSRF token) is not enough to sign or check a cookie: the session
		// key is a secret of its own.
		guesser := newSessionSigner([]byte("another-key-of-at-least-32-characters!"), tokens, clock)
		sess := signer.newSession(RoleViewer)
		_, ok := guesser.decode(signer.encode(sess))
		require.False(t, ok)
		require.NotEqual(t, signer.csrfToken(sess), guesser.csrfToken(sess))
	})

	t.Run("Tampered", func(t *testing.T) {
		t.Parallel()
		value := signer.encode(signer.newSession(RoleViewer))
		payload, mac, _ := strings.Cut(value, ".")
		raw, err := base64.RawURLEncoding.DecodeString(payload)
		require.NoError(t, err)
		promoted := base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(raw), "|viewer|", "|operator|", 1)))
		for _, bad := range []string{
			promoted + "." + mac, // a viewer making itself operator
			payload + "." + mac[:len(mac)-2] + "AA",
			payload, "", ".", "x.y", payload + ".",
		} {
			_, ok := signer.decode(bad)
			require.False(t, ok, bad)
		}
	})

	t.Run("Expired", func(t *testing.T) {
		t.Parallel()
		later := now
		moving := newSessionSigner(key, tokens, func() time.Time { return later })
		value := moving.encode(moving.newSession(RoleOperator))
		later = now.Add(SessionTTL - time.Second)
		_, ok := moving.decode(value)
		require.True(t, ok)
		later = now.Add(SessionTTL)
		_, ok = moving.decode(value)
		require.False(t, ok)
	})

	t.Run("ExpiryCappedOnTheServer", func(t *testing.T) {
		t.Parallel()
		// A validly signed cookie claiming to last longer than SessionTTL
		// from now (signed by a replica with a wrong clock, or a longer
		// TTL) is refused.
		long := signer.newSession(RoleOperator)
		long.Expires = now.Add(SessionTTL + time.Hour)
		_, ok := signer.decode(signer.encode(long))
		require.False(t, ok)
		long.Expires = now.Add(SessionTTL)
		_, ok = signer.decode(signer.encode(long))
		require.True(t, ok)
	})

	t.Run("CSRF", func(t *testing.T) {
		t.Parallel()
		a, b := signer.newSession(RoleOperator), signer.newSession(RoleOperator)
		require.True(t, signer.checkCSRF(a, signer.csrfToken(a)))
		require.False(t, signer.checkCSRF(a, signer.csrfToken(b)), "one session's token does not fit another")
		require.False(t, signer.checkCSRF(a, ""))
	})
}

func TestLocalPath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"/riverui/": "/riverui/", "/": "/", "": "/", "https://evil.example/": "/",
		"//evil.example/": "/", "/\\evil.example": "/", "riverui": "/",
		"/\t/evil.example": "/", "/\n/evil.example": "/", "/%2F/evil.example": "/", "/\xff": "/",
		"/jobs?next=//x#a": "/jobs?next=//x#a",
	} {
		require.Equal(t, want, localPath(in), in)
	}
}

package observability

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"html"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Redacted replaces a secret wherever [Redact] finds one.
const Redacted = "REDACTED"

// SecretQueryParams are the query parameters that carry a credential: the
// providers' keys (data.go.kr's serviceKey, DART's crtfc_key, the credit
// bureau's apiKey) and the common generic names. Matching ignores case.
var SecretQueryParams = []string{"serviceKey", "crtfc_key", "apiKey", "api_key", "access_token"}

// SecretHeaders are the HTTP headers that carry a credential.
var SecretHeaders = []string{"Authorization", "Proxy-Authorization", "X-Api-Key", "Cookie", "Set-Cookie"}

// secretPattern matches name=value for every secret query parameter (in a
// URL, a query string or an error quoting either) and the credential of an
// "Authorization: Bearer TOKEN" or "X-Api-Key: KEY" header line.
var secretPattern = regexp.MustCompile(
	`(?i)(\b(?:serviceKey|crtfc_key|apiKey|api_key|access_token)=)[^&\s"'#;,<>]*` +
		`|(\b(?:Bearer|Basic)\s+)[A-Za-z0-9._~+/=-]+` +
		`|(\b(?:X-Api-Key|Cookie|Set-Cookie):\s*)[^\s"',;]+`)

// Redact returns s with the value of every credential it quotes replaced by
// [Redacted]. It is buildrisk-radar's one redaction rule: provider errors,
// stored messages and every log line go through it, so a key that reaches
// a URL can never be read back from an error, a log or an API answer.
func Redact(s string) string {
	if s == "" {
		return s
	}
	return secretPattern.ReplaceAllStringFunc(s, func(m string) string {
		sub := secretPattern.FindStringSubmatch(m)
		for _, prefix := range sub[1:] {
			if prefix != "" {
				return prefix + Redacted
			}
		}
		return Redacted
	})
}

// redactAttr is the loggers' slog.HandlerOptions.ReplaceAttr: every string,
// error or URL value (the message included) goes through [Redact].
func redactAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(Redact(a.Value.String()))
	case slog.KindAny:
		switch v := a.Value.Any().(type) {
		case error:
			a.Value = slog.StringValue(Redact(v.Error()))
		case *url.URL:
			a.Value = slog.StringValue(Redact(v.String()))
		}
	}
	return a
}

// Secrets are the secret values a process holds, such as a worker's
// provider keys. [Secrets.Redact] replaces each of them wherever a text
// quotes it, in every form a message may carry it, before applying the
// [Redact] rule, which finds only a credential that a parameter or header
// name introduces: a provider's error message that quotes its key bare
// ("unregistered key KEY") is caught only here. A nil *Secrets redacts like
// [Redact].
type Secrets struct {
	// forms are the forms of every value, ASCII lower-cased, longest first.
	forms []string
}

// NewSecrets returns the Secrets of values; empty values are ignored. Each
// value is looked for raw, URL-encoded as a query value and as a path
// segment (once and twice), JSON- and HTML-escaped and base64-encoded in
// the standard and URL alphabets, with and without padding. Matching
// ignores ASCII case, so a percent-encoding in lower-case hex is found too.
func NewSecrets(values ...string) *Secrets {
	seen := map[string]bool{}
	s := &Secrets{}
	for _, v := range values {
		if v == "" {
			continue
		}
		for _, form := range secretForms(v) {
			form = asciiLower(form)
			if form != "" && !seen[form] {
				seen[form] = true
				s.forms = append(s.forms, form)
			}
		}
	}
	// The longest first: a form that holds another (the query-encoded key
	// holds the raw key's start) is replaced whole.
	slices.SortStableFunc(s.forms, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return s
}

// secretForms returns the forms in which a message may quote v.
func secretForms(v string) []string {
	jsonForm, _ := json.Marshal(v)
	raw := []byte(v)
	return []string{
		v,
		url.QueryEscape(v), url.PathEscape(v),
		url.QueryEscape(url.QueryEscape(v)), url.PathEscape(url.PathEscape(v)),
		strings.Trim(string(jsonForm), `"`), html.EscapeString(v),
		base64.StdEncoding.EncodeToString(raw), base64.URLEncoding.EncodeToString(raw),
		base64.RawStdEncoding.EncodeToString(raw), base64.RawURLEncoding.EncodeToString(raw),
	}
}

// Redact returns text with every form of every secret value replaced by
// [Redacted], then through [Redact]. The values go first: the [Redact]
// rule ends a parameter's value at the first '&' or ';', which may be
// inside a key, and the rest of the key would then be left to find.
func (s *Secrets) Redact(text string) string {
	if s != nil && text != "" {
		for _, form := range s.forms {
			text = replaceFold(text, form, Redacted)
		}
	}
	return Redact(text)
}

// RedactError returns an error whose text is err's through [Secrets.Redact]
// and which unwraps to err, so that errors.Is and errors.As still see the
// cause; nil for a nil err.
func (s *Secrets) RedactError(err error) error {
	if err == nil {
		return nil
	}
	if r, ok := err.(*redactedError); ok && r.secrets == s {
		return err
	}
	return &redactedError{err: err, secrets: s}
}

// redactedError is an error whose text goes through [Secrets.Redact].
type redactedError struct {
	err     error
	secrets *Secrets
}

// Error implements error.
func (e *redactedError) Error() string { return e.secrets.Redact(e.err.Error()) }

// Unwrap returns the cause.
func (e *redactedError) Unwrap() error { return e.err }

// replaceFold replaces every occurrence of lowerOld (ASCII lower-case) in
// s, ignoring ASCII case, with repl.
func replaceFold(s, lowerOld, repl string) string {
	lower := asciiLower(s)
	i := strings.Index(lower, lowerOld)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i >= 0 {
		b.WriteString(s[:i])
		b.WriteString(repl)
		s, lower = s[i+len(lowerOld):], lower[i+len(lowerOld):]
		i = strings.Index(lower, lowerOld)
	}
	b.WriteString(s)
	return b.String()
}

// asciiLower lower-cases the ASCII letters of s only, so that every byte
// keeps its offset.
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// Handler wraps h so that the message and every string, error and URL
// value of every record, groups and the logger's own attributes included,
// go through [Secrets.Redact]. A nil or empty *Secrets returns h.
func (s *Secrets) Handler(h slog.Handler) slog.Handler {
	if s == nil || len(s.forms) == 0 {
		return h
	}
	return &secretsHandler{next: h, secrets: s}
}

// secretsHandler implements [Secrets.Handler].
type secretsHandler struct {
	next    slog.Handler
	secrets *Secrets
}

func (h *secretsHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h *secretsHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.secrets.Redact(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *secretsHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	redacted := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		redacted[i] = h.attr(a)
	}
	return &secretsHandler{next: h.next.WithAttrs(redacted), secrets: h.secrets}
}

func (h *secretsHandler) WithGroup(name string) slog.Handler {
	return &secretsHandler{next: h.next.WithGroup(name), secrets: h.secrets}
}

// attr returns a with its value redacted.
func (h *secretsHandler) attr(a slog.Attr) slog.Attr {
	a.Value = a.Value.Resolve()
	switch a.Value.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(h.secrets.Redact(a.Value.String()))
	case slog.KindGroup:
		group := a.Value.Group()
		redacted := make([]slog.Attr, len(group))
		for i, g := range group {
			redacted[i] = h.attr(g)
		}
		a.Value = slog.GroupValue(redacted...)
	case slog.KindAny:
		switch v := a.Value.Any().(type) {
		case error:
			a.Value = slog.StringValue(h.secrets.Redact(v.Error()))
		case *url.URL:
			a.Value = slog.StringValue(h.secrets.Redact(v.String()))
		}
	}
	return a
}

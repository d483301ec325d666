package observability

import (
	"cmp"
	"context"
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
// provider keys. [Secrets.Redact] is buildrisk-radar's one scrubber of
// them: every provider error, stored message, API answer, log line, span
// status and River job error of a worker goes through it, before any
// truncation. It finds a value in every form a provider may quote it back
// (see [secretForms]), and any run of [MinSecretRun] or more consecutive
// characters of such a form counts as the value itself, so a prefix, a
// cut-off quotation or a form glued to other text is found too. It then
// applies the [Redact] rule, which finds only a credential that a
// parameter or header name introduces. A nil *Secrets redacts like
// [Redact].
type Secrets struct {
	// windows holds, by length, the ASCII lower-cased runs that count as a
	// secret: every run of MinSecretRun characters of every form, and each
	// form shorter than that whole.
	windows map[int]map[string]struct{}
	// lengths are the keys of windows, longest first.
	lengths []int
	// filter holds the rolling hashes of the runs of MinSecretRun
	// characters: most positions of a text are ruled out by one bit test
	// instead of a map lookup.
	filter runFilter
}

// NewSecrets returns the Secrets of values; empty values are ignored. Each
// value is looked for as configured and decoded (a key configured
// percent-encoded is also sent and quoted decoded), in every form of
// [secretForms]. Matching ignores ASCII case, so an upper-cased key and a
// percent-encoding in either case of hex are found too.
func NewSecrets(values ...string) *Secrets {
	s := &Secrets{windows: map[int]map[string]struct{}{}, filter: newRunFilter()}
	for _, v := range values {
		for _, plain := range secretValues(v) {
			for _, form := range secretForms(plain) {
				s.add(asciiLower(form))
			}
		}
	}
	for n := range s.windows {
		s.lengths = append(s.lengths, n)
	}
	slices.SortFunc(s.lengths, func(a, b int) int { return cmp.Compare(b, a) })
	return s
}

// add records the runs of form that count as the secret.
func (s *Secrets) add(form string) {
	if form == "" {
		return
	}
	n := min(len(form), MinSecretRun)
	if s.windows[n] == nil {
		s.windows[n] = map[string]struct{}{}
	}
	for i := 0; i+n <= len(form); i++ {
		s.windows[n][form[i:i+n]] = struct{}{}
		if n == MinSecretRun {
			s.filter.add(runHash(form[i : i+n]))
		}
	}
}

// Redact returns text with every run of every secret's forms replaced by
// [Redacted] (adjacent or overlapping runs become one), then through
// [Redact]. The values go first: the [Redact] rule ends a parameter's
// value at the first '&' or ';', which may be inside a key, and the rest
// of the key would then be left to find.
func (s *Secrets) Redact(text string) string {
	if s != nil && text != "" {
		text = s.redactRuns(text)
	}
	return Redact(text)
}

// redactRuns replaces every byte of text covered by a secret's run.
func (s *Secrets) redactRuns(text string) string {
	lower := asciiLower(text)
	var secret []bool
	mark := func(i, n int) {
		if secret == nil {
			secret = make([]bool, len(text))
		}
		for j := i; j < i+n; j++ {
			secret[j] = true
		}
	}
	for _, n := range s.lengths {
		windows := s.windows[n]
		if n == MinSecretRun {
			s.filter.each(lower, func(i int) {
				if _, ok := windows[lower[i:i+n]]; ok {
					mark(i, n)
				}
			})
			continue
		}
		for i := 0; i+n <= len(lower); i++ {
			if _, ok := windows[lower[i:i+n]]; ok {
				mark(i, n)
			}
		}
	}
	if secret == nil {
		return text
	}
	var b strings.Builder
	b.Grow(len(text))
	for i := 0; i < len(text); i++ {
		switch {
		case !secret[i]:
			b.WriteByte(text[i])
		case i == 0 || !secret[i-1]:
			b.WriteString(Redacted)
		}
	}
	return b.String()
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
	if s == nil || len(s.lengths) == 0 {
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

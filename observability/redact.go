package observability

import (
	"log/slog"
	"net/url"
	"regexp"
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

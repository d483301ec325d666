package observability

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// keyForm is one way a provider may quote a key back: its name, the text
// it quotes and the part of that text which carries the key.
type keyForm struct {
	name, text, carried string
}

// quotedForms returns the forms of the list in which a provider
// may quote the configured key back, each built here independently of
// NewSecrets: raw, upper-case, percent-encoded keeping '/' (Python's
// quote()) and encoding it, '+' taken as a space, hex, base64, base64 at
// both other alignments and in the URL-safe alphabet, HTML numeric
// references, a prefix one character short, JSON-escaped, the URL as the
// provider received it and, for a key configured percent-encoded, the key
// decoded.
func quotedForms(key string) []keyForm {
	whole := func(name, text string) keyForm { return keyForm{name: name, text: text, carried: text} }
	forms := []keyForm{
		whole("raw", key),
		whole("upper", strings.ToUpper(key)),
		whole("percentKeepingSlash", pythonQuote(key, "/")),
		whole("percentLowerHex", strings.ToLower(pythonQuote(key, ""))),
		whole("plusAsSpace", strings.ReplaceAll(key, "+", " ")),
		whole("hex", hex.EncodeToString([]byte(key))),
		whole("base64", base64.StdEncoding.EncodeToString([]byte(key))),
		whole("htmlNumericDecimal", htmlEveryChar(key, "&#%d;")),
		whole("htmlNumericHex", htmlEveryChar(key, "&#x%X;")),
		whole("prefixShortByOne", key[:len(key)-1]),
		whole("jsonEscaped", jsonEscapeAll(key)),
		{name: "urlAsReceived", text: "/1613000/RTMSDataSvcAptTrade?LAWD_CD=11110&serviceKey=" + url.QueryEscape(key), carried: url.QueryEscape(key)},
	}
	for _, prefix := range []string{"x", "xy"} {
		for name, enc := range map[string]*base64.Encoding{"std": base64.StdEncoding, "url": base64.URLEncoding} {
			text := enc.EncodeToString([]byte(prefix + key))
			// Only the characters made from the key's bytes alone carry it.
			from, to := (8*len(prefix)+5)/6, 8*(len(prefix)+len(key))/6
			forms = append(forms, keyForm{name: "misalignedBase64/" + name + "/" + prefix, text: text, carried: text[from:to]})
		}
	}
	if decoded, err := url.QueryUnescape(key); err == nil && decoded != key {
		forms = append(forms, whole("decoded", decoded))
	}
	return forms
}

// pythonQuote percent-encodes every byte of s but the unreserved ones and
// those of safe, in upper-case hex, like Python's urllib.parse.quote.
func pythonQuote(s, safe string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("-._~"+safe, c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// htmlEveryChar writes every character of s as an HTML numeric reference.
func htmlEveryChar(s, format string) string {
	var b strings.Builder
	for _, r := range s {
		fmt.Fprintf(&b, format, r)
	}
	return b.String()
}

// jsonEscapeAll writes s as JSON string content with every character but
// letters and digits \u-escaped, and '/' as "\/".
func jsonEscapeAll(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '/':
			b.WriteString(`\/`)
		case 'A' <= r && r <= 'Z' || 'a' <= r && r <= 'z' || '0' <= r && r <= '9':
			b.WriteRune(r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// requireNoRun fails when text holds any run of MinSecretRun characters of
// carried (or carried whole when shorter), ignoring ASCII case.
func requireNoRun(t *testing.T, text, carried, what string) {
	t.Helper()
	lowerText, lowerCarried := strings.ToLower(text), strings.ToLower(carried)
	n := min(MinSecretRun, len(lowerCarried))
	for i := 0; i+n <= len(lowerCarried); i++ {
		if strings.Contains(lowerText, lowerCarried[i:i+n]) {
			t.Fatalf("%s: %q survives in %q", what, carried[i:i+n], text)
		}
	}
}

// Each of the forms of a key quoted back by a provider, around a
// MOLIT key with '+', '/' and '=' configured as is, a data.go.kr
// "Encoding" key configured percent-encoded and a 40-character DART key,
// leaves no run of 12 characters of the key in the text.
func TestSecrets_RedactQuotedForms(t *testing.T) {
	t.Parallel()
	keys := map[string]string{
		"molit":        "mOlit7Key+Secret/7f3a9Q+b/c==",
		"molitEncoded": "Zq81kEYencoded%2Ba%2Fb%3D9xPp",
		"dart":         "3f9a1c27be04d5f68a9b0c1d2e3f4a5b6c7d8e9f",
	}
	values := make([]string, 0, len(keys))
	for _, key := range keys {
		values = append(values, key)
	}
	secrets := NewSecrets(values...)
	for name, key := range keys {
		forms := quotedForms(key)
		require.GreaterOrEqual(t, len(forms), 13)
		for _, form := range forms {
			t.Run(name+"/"+form.name, func(t *testing.T) {
				got := secrets.Redact(`corp_name "Z` + form.text + `…" refused (code 010)`)
				requireNoRun(t, got, form.carried, form.name)
				require.Contains(t, got, Redacted)
				require.Contains(t, got, `refused (code 010)`, "text around the key is kept")
			})
		}
	}
}

// A key shorter than MinSecretRun is still found whole, and text that
// merely shares fewer than MinSecretRun characters with a key is kept.
func TestSecrets_RedactShortKeysAndNearMisses(t *testing.T) {
	t.Parallel()
	secrets := NewSecrets("short-key", "abcdefghijklmnopqrstuvwxyz")
	require.Equal(t, "a "+Redacted+" b", secrets.Redact("a short-key b"))
	require.Equal(t, "abcdefghijk then klmnopq", secrets.Redact("abcdefghijk then klmnopq"), "11 characters are not the key")
	require.Equal(t, "x"+Redacted+"x", secrets.Redact("xbcdefghijklmx"), "12 are")
}

// FuzzSecrets_Redact makes a key from random bytes, quotes it in every form
// of quotedForms inside random text, and checks that no run of
// MinSecretRun characters of any form survives the redaction.
func FuzzSecrets_Redact(f *testing.F) {
	f.Add([]byte("molitKey+Secret/7f3a=="), "unregistered key ")
	f.Add([]byte("3f9a1c27be04d5f68a9b0c1d2e3f4a5b6c7d8e9f"), `corp_name "Z`)
	f.Add([]byte("enc%2Bkey%2Fvalue%3D%3D"), "")
	f.Add([]byte{0, 1, 2, 250, 251, 252, 253, 254, 255, 9, 8, 7, 6, 5}, "\u00e9\u00e9")
	f.Fuzz(func(t *testing.T, raw []byte, around string) {
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=%-_.~&;:"
		if len(raw) <= MinSecretRun || len(raw) > 96 { // a prefix one short is then still a run
			t.Skip()
		}
		key := make([]byte, len(raw))
		for i, c := range raw {
			key[i] = alphabet[int(c)%len(alphabet)]
		}
		secrets := NewSecrets(string(key))
		for _, form := range quotedForms(string(key)) {
			got := secrets.Redact(around + form.text + around)
			requireNoRun(t, got, form.carried, form.name)
		}
	})
}

// BenchmarkSecrets_Redact measures the scrubber on a log line of a worker
// holding four provider keys: what every log line and message costs.
func BenchmarkSecrets_Redact(b *testing.B) {
	secrets := NewSecrets("mOlit7Key+Secret/7f3a9Q+b/c==", "3f9a1c27be04d5f68a9b0c1d2e3f4a5b6c7d8e9f",
		"Zq81kEYencoded%2Ba%2Fb%3D9xPp", "creditKeySecret0e88creditKey")
	line := `{"time":"2026-12-07T20:00:00Z","level":"INFO","msg":"execution finished","job":"aptTrade","request_id":"1234",` +
		`"status":"FAILED","message":"MOLIT aptTrade 11110:202501: provider code \"30\" (SERVICE_KEY_IS_NOT_REGISTERED_ERROR) after 3 attempts"}`
	b.ReportAllocs()
	for b.Loop() {
		_ = secrets.Redact(line)
	}
}

// BenchmarkNewSecrets measures building the scrubber of four keys, once
// per process.
func BenchmarkNewSecrets(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = NewSecrets("mOlit7Key+Secret/7f3a9Q+b/c==", "3f9a1c27be04d5f68a9b0c1d2e3f4a5b6c7d8e9f",
			"Zq81kEYencoded%2Ba%2Fb%3D9xPp", "creditKeySecret0e88creditKey")
	}
}

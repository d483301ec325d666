package observability

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"net/url"
	"strconv"
	"strings"
)

// MinSecretRun is the shortest run of consecutive characters of a secret,
// in any of its forms, that counts as the secret itself: a provider that
// quotes a key cut short, or glued to other text, still shows the key.
const MinSecretRun = 12

// secretValues returns v and every plain value it stands for: v decoded
// once and twice as a query value and as a path segment (a data.go.kr
// "Encoding" key is configured percent-encoded and sent, so quoted back,
// decoded), and each of those with '+' read as a space, as a form decoder
// reads it.
func secretValues(v string) []string {
	if v == "" {
		return nil
	}
	values := []string{v}
	seen := map[string]bool{v: true}
	addValue := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			values = append(values, s)
		}
	}
	for i := 0; i < len(values) && i < 16; i++ {
		if d, err := url.QueryUnescape(values[i]); err == nil {
			addValue(d)
		}
		if d, err := url.PathUnescape(values[i]); err == nil {
			addValue(d)
		}
		addValue(strings.ReplaceAll(values[i], "+", " "))
	}
	return values
}

// secretForms returns the forms in which a provider or a message may quote
// v: raw; percent-encoded as a query value, as a path segment, with only
// the unreserved characters kept and with '/' kept too (Python's quote()),
// and each of those encoded once more; JSON- and Go-quoted, with HTML
// characters escaped or not, '/' as "\/" and every other character
// \u-escaped; HTML-escaped by name and by numeric reference (decimal and
// hex, every character or the special ones only); hex; and base64 in both
// alphabets at each of the three alignments a surrounding text may give
// it. Upper- and lower-case variants need no form of their own: matching
// ignores ASCII case.
func secretForms(v string) []string {
	forms := []string{v}
	for _, encoded := range []string{
		url.QueryEscape(v), url.PathEscape(v), percentEncode(v, ""), percentEncode(v, "/"),
	} {
		forms = append(forms, encoded, url.QueryEscape(encoded))
	}
	forms = append(forms, jsonForms(v)...)
	forms = append(forms,
		html.EscapeString(v),
		htmlNumeric(v, "&#%d;", false), htmlNumeric(v, "&#x%x;", false),
		htmlNumeric(v, "&#%d;", true), htmlNumeric(v, "&#x%x;", true),
		hex.EncodeToString([]byte(v)),
	)
	return append(forms, base64Forms(v)...)
}

// percentEncode percent-encodes every byte of s except the unreserved
// characters of RFC 3986 and those of keep.
func percentEncode(s, keep string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isAlnum(c) || strings.IndexByte("-._~"+keep, c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// jsonForms returns v as the content of a JSON or Go string literal, as
// the usual encoders write it.
func jsonForms(v string) []string {
	htmlEscaped, _ := json.Marshal(v)
	var plain bytes.Buffer
	enc := json.NewEncoder(&plain)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	forms := []string{
		strings.Trim(string(htmlEscaped), `"`),
		strings.Trim(strings.TrimSpace(plain.String()), `"`),
		strings.Trim(strconv.Quote(v), `"`),
		strings.Trim(strconv.QuoteToASCII(v), `"`),
	}
	var all strings.Builder
	for _, r := range v {
		switch {
		case r < 0x80 && isAlnum(byte(r)):
			all.WriteRune(r)
		case r == '/':
			all.WriteString(`\/`)
		case r > 0xffff:
			fmt.Fprintf(&all, `\U%08x`, r)
		default:
			fmt.Fprintf(&all, `\u%04x`, r)
		}
	}
	slashed := make([]string, 0, len(forms))
	for _, f := range forms {
		slashed = append(slashed, strings.ReplaceAll(f, "/", `\/`))
	}
	return append(append(forms, all.String()), slashed...)
}

// htmlNumeric writes the characters of s as HTML numeric references in
// format ("&#%d;" or "&#x%x;"): every one, or with specialOnly only those
// other than letters and digits.
func htmlNumeric(s, format string, specialOnly bool) string {
	var b strings.Builder
	for _, r := range s {
		if specialOnly && r < 0x80 && isAlnum(byte(r)) {
			b.WriteRune(r)
			continue
		}
		fmt.Fprintf(&b, format, r)
	}
	return b.String()
}

// base64Forms returns v base64-encoded in the standard and URL alphabets,
// whole (padded) and, for each alignment a text before it may give it
// (0, 1 or 2 bytes before v in the encoded text), the characters made of
// v's bytes alone. A value too short to leave MinSecretRun such
// characters is only looked for whole.
func base64Forms(v string) []string {
	forms := []string{
		base64.StdEncoding.EncodeToString([]byte(v)),
		base64.URLEncoding.EncodeToString([]byte(v)),
	}
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		for before := 0; before < 3; before++ {
			encoded := enc.EncodeToString(append(make([]byte, before), v...))
			// Character j holds bits [6j, 6j+6) of the text: it is v's alone
			// when those bits lie within v's bytes.
			from, to := (8*before+5)/6, 8*(before+len(v))/6
			if to-from >= MinSecretRun {
				forms = append(forms, encoded[from:to])
			}
		}
	}
	return forms
}

// isAlnum reports whether c is an ASCII letter or digit.
func isAlnum(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
}

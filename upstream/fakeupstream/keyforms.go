package fakeupstream

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
)

// KeyForm is one form in which Config.QuoteKeyForms quotes a key back.
type KeyForm struct {
	// Name says which form it is ("hex", "misalignedBase64/url/xy", ...).
	Name string
	// Text is what the refusal quotes.
	Text string
	// Carried is the part of Text made of the key alone: all of it, but
	// the URL's path around the key and the base64 characters that mix the
	// key's bits with those of the text before or after it.
	Carried string
}

// QuotedKeyForms returns the forms in which a careless provider may quote
// the key it received (as a query value, decoded) back, for a call whose
// path and query were requestURI: raw, upper-case, percent-encoded keeping
// '/' (Python's quote()) and encoding it in lower-case hex, '+' taken as a
// space, hex, base64 (also URL-safe, and at both other alignments), HTML
// numeric references (decimal and hex), a prefix one character short,
// JSON-escaped, the URL as received and, when the key is itself
// percent-encoded (a data.go.kr "Encoding" key configured as issued), the
// key decoded.
func QuotedKeyForms(key, requestURI string) []KeyForm {
	whole := func(name, text string) KeyForm { return KeyForm{Name: name, Text: text, Carried: text} }
	forms := []KeyForm{
		whole("raw", key),
		whole("upper", strings.ToUpper(key)),
		whole("percentKeepingSlash", quote(key, "/")),
		whole("percentLowerHex", strings.ToLower(quote(key, ""))),
		whole("plusAsSpace", strings.ReplaceAll(key, "+", " ")),
		whole("hex", hex.EncodeToString([]byte(key))),
		whole("base64", base64.StdEncoding.EncodeToString([]byte(key))),
		whole("htmlNumericDecimal", numericReferences(key, "&#%d;")),
		whole("htmlNumericHex", numericReferences(key, "&#x%X;")),
		whole("jsonEscaped", jsonEscapeAll(key)),
		{Name: "urlAsReceived", Text: requestURI, Carried: url.QueryEscape(key)},
	}
	if len(key) > 1 {
		forms = append(forms, whole("prefixShortByOne", key[:len(key)-1]))
	}
	for _, before := range []string{"x", "xy"} {
		for name, enc := range map[string]*base64.Encoding{"std": base64.StdEncoding, "url": base64.URLEncoding} {
			text := enc.EncodeToString([]byte(before + key))
			// Only the characters made of the key's bits alone carry it.
			from, to := (8*len(before)+5)/6, 8*(len(before)+len(key))/6
			forms = append(forms, KeyForm{Name: "misalignedBase64/" + name + "/" + before, Text: text, Carried: text[from:to]})
		}
	}
	if decoded, err := url.QueryUnescape(key); err == nil && decoded != key {
		forms = append(forms, whole("decoded", decoded))
	}
	return forms
}

// quotedKeyFormsMessage is the refusal Config.QuoteKeyForms sends: every
// form of QuotedKeyForms, each named.
func quotedKeyFormsMessage(key, requestURI string) string {
	var b strings.Builder
	b.WriteString("unregistered key")
	for _, f := range QuotedKeyForms(key, requestURI) {
		fmt.Fprintf(&b, " %s=[%s]", f.Name, f.Text)
	}
	return b.String()
}

// quote percent-encodes every byte of s but the unreserved ones and those
// of safe, in upper-case hex, like Python's urllib.parse.quote.
func quote(s, safe string) string {
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

// numericReferences writes every character of s as an HTML numeric
// reference in format.
func numericReferences(s, format string) string {
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

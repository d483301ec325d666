package catalog

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ParamError is a user's mistake in a request: Field names where it is
// ("params.regions[1]", "maxCalls"), Message says what is wrong. The api
// answers it with 400, the CLI with exit code 2.
type ParamError struct {
	Field   string
	Message string
}

// Error implements error.
func (e *ParamError) Error() string { return e.Field + ": " + e.Message }

// IsParamError reports whether err is, or wraps, a *ParamError.
func IsParamError(err error) bool {
	var pe *ParamError
	return errors.As(err, &pe)
}

// DecodeStrict decodes raw into dst rejecting unknown fields, trailing data
// and wrong types, and turns every decoding failure into a *ParamError that
// names the field under prefix. Empty input decodes as {}.
func DecodeStrict(raw json.RawMessage, dst any, prefix string) error {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		trimmed = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonParamError(err, prefix)
	}
	if _, err := dec.Token(); err != io.EOF {
		return &ParamError{Field: prefix, Message: "unexpected data after the JSON object"}
	}
	return nil
}

func jsonParamError(err error, prefix string) error {
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntaxErr):
		return &ParamError{Field: prefix, Message: "malformed JSON: " + syntaxErr.Error()}
	case errors.As(err, &typeErr):
		field := prefix
		if typeErr.Field != "" {
			field = prefix + "." + fieldPath(typeErr.Field)
		}
		return &ParamError{Field: field, Message: fmt.Sprintf("expected %s, got JSON %s", typeErr.Type, typeErr.Value)}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return &ParamError{Field: prefix + "." + name, Message: "unknown field"}
	default:
		return &ParamError{Field: prefix, Message: "invalid JSON: " + err.Error()}
	}
}

// fieldPath writes encoding/json's dotted path of a value ("regions.0",
// which Go 1.27 reports down to the array element) the way every other
// ParamError names an element: "regions[0]".
func fieldPath(dotted string) string {
	var b strings.Builder
	for i, part := range strings.Split(dotted, ".") {
		if _, err := strconv.Atoi(part); err == nil && i > 0 {
			b.WriteString("[" + part + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(part)
	}
	return b.String()
}

// ParamsHash is the identity of canonical params: two requests with the same
// hash ask for the same work, which is what lets a restart resume.
func ParamsHash(canonical json.RawMessage) string {
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:])
}

// MaxCallsMax is the largest maxCalls a request may give: it bounds one
// execution's provider calls, and it fits the int32 column it is stored in.
const MaxCallsMax = 1_000_000

// QuoteMax is how many bytes of a bad value an error message quotes.
const QuoteMax = 40

// Quote returns s quoted for an error message. A value longer than QuoteMax
// bytes is cut (on a character boundary) and its length given instead, so
// an error never echoes a huge input back to its sender or into a log.
func Quote(s string) string {
	if len(s) <= QuoteMax {
		return strconv.Quote(s)
	}
	cut := QuoteMax
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:cut]), len(s))
}

package api

import (
	"encoding/base64"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxCursorChars is the longest cursor accepted: the cursors this API
// makes (a worker's start time and id, a coverage target) are far shorter.
const maxCursorChars = 512

// decodeCursor decodes a page cursor this API made (unpadded URL-safe
// base64 of a text) and checks its text can be one: not empty, valid
// UTF-8 without NUL or another control character. A forged cursor is thus
// refused before any SQL sees it, instead of failing there (PostgreSQL
// refuses a NUL or invalid UTF-8 in text with SQLSTATE 22021).
func decodeCursor(s string) (string, bool) {
	if s == "" || len(s) > maxCursorChars {
		return "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(raw) == 0 || !utf8.Valid(raw) {
		return "", false
	}
	text := string(raw)
	if strings.ContainsFunc(text, unicode.IsControl) {
		return "", false
	}
	return text, true
}

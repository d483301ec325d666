package api

import (
	"bytes"
	"encoding/json/jsontext"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/buildrisk/radar/catalog"
)

// requireJSON guards every /v1 call that may change something (any method
// but GET and HEAD) and carries a body: the body must be declared
// application/json, else 415 (a cross-site form or text/plain POST needs
// no CORS preflight, a JSON one does), and must not repeat a key in any
// object, else 400 (encoding/json keeps the last, another parser the first:
// what was checked would not be what runs), nor be null, else 400 (it
// would be taken for no body at all). A call without a body passes.
//
// It runs after limitBody, so the body it reads is bounded (and, for an
// unknown length, already buffered for an authenticated caller).
func (s *Server) requireJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/") || isReadOnly(r) || r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		media, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || media != "application/json" {
			w.Header().Set("Connection", "close")
			writeProblem(w, ProblemUnsupportedMediaType, fmt.Sprintf("the body must be application/json (Content-Type: %s)", catalog.Quote(r.Header.Get("Content-Type"))))
			return
		}
		raw, err := io.ReadAll(r.Body)
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			s.tooLarge(w, r)
			return
		case err != nil:
			writeProblem(w, ProblemInvalidParams, "error reading the request body")
			return
		}
		if field, dup := duplicateKey(raw); dup {
			writeProblem(w, ProblemInvalidParams, field+": duplicate key in the JSON body", &huma.ErrorDetail{Location: field, Message: "duplicate key in the JSON body"})
			return
		}
		if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			// encoding/json leaves the input as is for null: the call would
			// run as if it had no body at all.
			writeProblem(w, ProblemInvalidParams, "body: the JSON body is null; send an object", &huma.ErrorDetail{Location: "body", Message: "null is not an object"})
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(raw))
		r.ContentLength = int64(len(raw))
		next.ServeHTTP(w, r)
	})
}

// duplicateKey reports the first object member of raw whose name repeats
// one before it in the same object, named body.<path> like every other 400
// (array elements as [n]). Other syntax errors are left to the handler,
// which names them in its own words.
func duplicateKey(raw []byte) (string, bool) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return "", false
	}
	err := jsontext.NewDecoder(bytes.NewReader(raw)).SkipValue()
	var syntax *jsontext.SyntacticError
	if !errors.As(err, &syntax) || !errors.Is(err, jsontext.ErrDuplicateName) {
		return "", false
	}
	field := "body"
	for tok := range syntax.JSONPointer.Tokens() {
		if _, err := strconv.Atoi(tok); err == nil {
			field += "[" + tok + "]"
		} else {
			field += "." + tok
		}
	}
	return field, true
}

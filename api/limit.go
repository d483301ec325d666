package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/buildrisk/radar/observability"
)

// MaxBodyBytesDefault is the default request body limit (1 MiB): far more
// than any job's params need (500 regions, 5,000 corp codes).
const MaxBodyBytesDefault = 1 << 20

// limitBody answers 413 for a body over the limit before any handler reads
// it: at once when Content-Length says so, and after at most limit+1 bytes
// for a body of unknown length from an authenticated caller. Such a body
// within the limit is buffered (at most limit bytes) and handed on, so no
// handler can read more than the limit, whatever path it takes (Huma's
// RawBody has no limit of its own). A body of unknown length from anyone
// else (the console's login and logout forms, paths that take no body) is
// never buffered: it is only capped while the handler streams it.
//
// A GET or HEAD carries no body: one that comes with a body is answered
// 400 before any of it is read (and its connection closed), from anyone,
// so a viewer cannot make the api buffer a body a read never uses.
//
// It runs after authenticate, which has already refused an anonymous /v1
// or River UI call without reading its body.
func (s *Server) limitBody(next http.Handler) http.Handler {
	limit := s.cfg.MaxBodyBytes
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		if isReadOnly(r) {
			w.Header().Set("Connection", "close")
			writeProblem(w, ProblemBodyNotAllowed, fmt.Sprintf("a %s request carries no body", r.Method))
			return
		}
		if r.ContentLength > limit {
			s.tooLarge(w, r)
			return
		}
		if r.ContentLength < 0 {
			if !authenticated(r) {
				r.Body = http.MaxBytesReader(w, r.Body, limit)
				next.ServeHTTP(w, r)
				return
			}
			buf, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
			var tooLarge *http.MaxBytesError
			switch {
			case errors.As(err, &tooLarge):
				s.tooLarge(w, r)
				return
			case err != nil:
				writeProblem(w, ProblemInvalidParams, "error reading the request body")
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(buf))
			r.ContentLength = int64(len(buf))
		}
		// A Content-Length within the limit: the server stops the body there.
		next.ServeHTTP(w, r)
	})
}

func (s *Server) tooLarge(w http.ResponseWriter, r *http.Request) {
	s.cfg.Instruments.HTTPRefused(r.Context(), observability.RefusalBodyTooLarge)
	w.Header().Set("Connection", "close")
	writeProblem(w, ProblemBodyTooLarge, fmt.Sprintf("the request body is over the limit of %d bytes", s.cfg.MaxBodyBytes))
}

package api

import (
	"context"
	"net/http"
	"strings"
)

// riverUIRefusal names, for each of River UI's mutations, the service's own
// operation to use instead. River UI is mounted read-only: its cancel would
// end a River job behind the service's back (recorded as a drain and then
// resumed), its delete would leave the request QUEUED, its retry would run a
// request twice and its queue controls would bypass the service's pause.
var riverUIRefusal = map[string]string{
	"/api/jobs/cancel": "stop a run with POST /v1/jobs/{job}/stop (the console's Stop button), " +
		"or abandon a dead worker's execution with POST /v1/executions/{id}/abandon",
	"/api/jobs/delete": "a queued request ends by running, or by POST /v1/jobs/{job}/stop once it runs; " +
		"a dead worker's request is failed by the reaper",
	"/api/jobs/retry": "request the job again with POST /v1/jobs/{job}/requests: it resumes from the last commit",
}

// riverUIQueueRefusal answers River UI's queue mutations (pause, resume,
// update).
const riverUIQueueRefusal = "the service's queues are River's to run; stop a run with POST /v1/jobs/{job}/stop"

// riverUIReadOnly serves River UI for reading only: every request that is
// not a GET, HEAD or OPTIONS is refused with 403 and a message naming the
// service's operation to use instead, before River UI sees it. Its pages
// get the console's framing and sniffing protections.
func riverUIReadOnly(next http.Handler, audit func(ctx context.Context, path string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			next.ServeHTTP(w, r)
			return
		}
		path := strings.TrimPrefix(r.URL.Path, riverUIPrefix)
		instead, ok := riverUIRefusal[path]
		if !ok {
			instead = riverUIQueueRefusal
		}
		audit(r.Context(), path)
		writeProblem(w, ProblemForbidden, "River UI is read-only in buildrisk-radar: "+instead)
	})
}

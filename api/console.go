package api

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/buildrisk/radar/observability"
)

// The batch console: one server-rendered page at / whose small script
// (web/console.js, no build step, no CDN) polls the /v1 JSON API with the
// session cookie and renders jobs (a job held to a deadline with its
// forecast, marked late or at risk), workers, requests with their progress,
// provider budgets and alerts. Operators also get the request form (built
// from the job's params schema, showing the call estimate first), stop and
// abandon buttons; viewers get none of them. The role is decided here, on
// the server, and the API refuses a viewer's POST anyway.

//go:embed web
var webFiles embed.FS

var consoleTemplates = template.Must(template.ParseFS(webFiles, "web/*.html"))

// consolePage is the data of web/console.html.
type consolePage struct {
	Role     Role
	Operator bool
	CSRF     string
	RiverUI  bool
	Insecure bool
	Version  string
	// TimeZone is BUILDRISK_TIMEZONE, the zone schedules tick in: the
	// page names it beside a cron expression, since every time the api
	// sends is UTC.
	TimeZone string
	// Deadlines: some job has a deadline (BUILDRISK_DEADLINE_<JOB>), so
	// the job table has a Deadline column; without any, it has none.
	Deadlines bool
}

// loginPage is the data of web/login.html.
type loginPage struct {
	Next  string
	Error string
}

func (s *Server) registerConsole() {
	static, _ := fs.Sub(webFiles, "web/static")
	files := http.StripPrefix("/static/", http.FileServerFS(static))
	s.mux.Handle("GET /static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The file server answers 500 for a name fs.FS refuses (invalid
		// UTF-8, NUL, ".."): such a name is simply not one of our files.
		if !servableName(strings.TrimPrefix(r.URL.Path, "/static/")) {
			http.NotFound(w, r)
			return
		}
		files.ServeHTTP(w, r)
	}))
	// Browsers ask for /favicon.ico on every page of the site, the JSON
	// ones included: answer it rather than 404.
	s.mux.Handle("GET /favicon.ico", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=86400")
		http.ServeFileFS(w, r, static, "favicon.ico")
	}))
	s.mux.HandleFunc("GET /{$}", s.consoleHome)
	s.mux.HandleFunc("GET /login", s.loginForm)
	s.mux.HandleFunc("POST /login", s.login)
	s.mux.HandleFunc("POST /logout", s.logout)
}

// consoleHome renders the console for a logged-in user (anyone when auth is
// off), and sends everyone else to the login page.
func (s *Server) consoleHome(w http.ResponseWriter, r *http.Request) {
	page := consolePage{Role: RoleOperator, Insecure: s.cfg.Insecure, RiverUI: s.cfg.RiverUI != nil, Version: s.cfg.Version,
		TimeZone: s.cfg.Coverage.Location().String(), Deadlines: len(s.cfg.Deadlines) > 0}
	if !s.cfg.Insecure {
		sess, ok := s.sessionFrom(r)
		if !ok {
			http.Redirect(w, r, "/login", http.StatusSeeOther)
			return
		}
		page.Role, page.CSRF = sess.Role, s.sessions.csrfToken(sess)
	}
	page.Operator = page.Role == RoleOperator
	page.RiverUI = page.RiverUI && page.Operator
	s.render(w, http.StatusOK, "console.html", page)
}

func (s *Server) loginForm(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.sessionFrom(r); ok || s.cfg.Insecure {
		http.Redirect(w, r, boundedNext(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	s.render(w, http.StatusOK, "login.html", loginPage{Next: boundedNext(r.URL.Query().Get("next"))})
}

// login exchanges an API token for a session cookie. The token is checked
// like a bearer token; the cookie carries only the role.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if err := s.crossOrigin.Check(r); err != nil {
		http.Error(w, "cross-origin login refused", http.StatusForbidden)
		return
	}
	if !readConsoleForm(w, r, "login", maxLoginFormBytes) {
		return
	}
	next := boundedNext(r.PostFormValue("next"))
	role, name, ok := s.lookupToken(strings.TrimSpace(r.PostFormValue("token")))
	if !ok {
		// A right token is never limited; a wrong one is answered 429 once
		// its client is.
		if s.authFailed(w, r, observability.AuthViaLogin, false) {
			return
		}
		s.audit(r.Context(), "anonymous", AuditLoginFailed, "", "")
		s.render(w, http.StatusUnauthorized, "login.html", loginPage{Next: next, Error: "That token is not valid. Use a viewer or operator token from BUILDRISK_API_TOKENS."})
		return
	}
	sess, err := s.startSession(r.Context(), role, name)
	if err != nil {
		s.cfg.Logger.Error("error starting a console session", "error", err.Error())
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
		http.Error(w, "the database is unavailable; try again in a moment", http.StatusServiceUnavailable)
		return
	}
	setSessionCookie(w, r, s.sessions.encode(sess), int(SessionTTL.Seconds()))
	s.audit(r.Context(), name, AuditLogin, "", string(role))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout ends the session on the server and deletes the cookie; with
// everywhere=1 an operator's ends every console session, a viewer's every
// session of its own token (endSessions). It is a POST carrying the CSRF
// token, so another site cannot sign a user out.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if err := s.crossOrigin.Check(r); err != nil {
		http.Error(w, "cross-origin logout refused", http.StatusForbidden)
		return
	}
	if !readConsoleForm(w, r, "logout", maxLogoutFormBytes) {
		return
	}
	if sess, ok := s.sessionFrom(r); ok {
		if !s.sessions.checkCSRF(sess, r.PostFormValue("csrf")) {
			http.Error(w, "missing or wrong CSRF token; reload the console", http.StatusForbidden)
			return
		}
		everywhere := r.PostFormValue("everywhere") == "1"
		if err := s.endSessions(r.Context(), sess, everywhere); err != nil {
			s.cfg.Logger.Error("error ending a console session", "error", err.Error())
			w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
			http.Error(w, "the database is unavailable: the session is not ended yet; try again in a moment", http.StatusServiceUnavailable)
			return
		}
		detail := ""
		switch {
		case everywhere && sess.Role == RoleOperator:
			detail = "everywhere"
		case everywhere:
			detail = "every session of this token"
		}
		s.audit(r.Context(), sess.Name, AuditLogout, "", detail)
	}
	setSessionCookie(w, r, "", -1)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// render writes a console template with headers that keep the page to its
// own scripts and out of other sites' frames.
func (s *Server) render(w http.ResponseWriter, status int, name string, data any) {
	var buf bytes.Buffer
	if err := consoleTemplates.ExecuteTemplate(&buf, name, data); err != nil {
		s.cfg.Logger.Error("error rendering console page", "page", name, "error", err.Error())
		http.Error(w, "internal error; see the server log", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// localPath keeps a redirect target on this site: a clean path, never a URL
// or a protocol-relative //host. A browser strips tabs and newlines and reads
// a backslash as a slash, so "/\t/evil.example" or "/\\evil.example" would
// leave the site: any control character or backslash, a scheme, a host or a
// path that (decoded) starts with "//" gives "/" instead.
func localPath(p string) string {
	if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, '\\') {
		return "/"
	}
	for _, r := range p {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return "/"
		}
	}
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" ||
		!strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") {
		return "/"
	}
	return p
}

// MaxNextBytes is the longest next a login keeps: a longer one loses its
// query, and then, when its path alone is still longer, is dropped for "/".
const MaxNextBytes = 2048

// maxLoginFormBytes bounds the login form's body: a token and a next of
// MaxNextBytes, percent-encoded, with room to spare.
const maxLoginFormBytes = 16 << 10

// maxLogoutFormBytes bounds the logout form's body: a CSRF token and a flag.
const maxLogoutFormBytes = 4 << 10

// boundedNext returns p as a local redirect target (localPath) of at most
// MaxNextBytes: a longer one without its query and fragment (a River UI
// deep link still lands on its page), or "/" when its path alone is
// longer. A long next is dropped, never a reason to refuse a login.
func boundedNext(p string) string {
	p = localPath(p)
	if len(p) <= MaxNextBytes {
		return p
	}
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	if len(p) > MaxNextBytes {
		return "/"
	}
	return p
}

// readConsoleForm parses the console's name form ("login", "logout"),
// its body bounded to limit bytes, and answers a form it cannot read: 413
// for one over limit, 400 for one that is malformed. Such a form says
// nothing about the token or CSRF token it carries, so it is never
// answered, counted or audited as a wrong one. It reports whether the form
// was read.
func readConsoleForm(w http.ResponseWriter, r *http.Request, name string, limit int64) bool {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	err := r.ParseForm()
	if err == nil {
		return true
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		w.Header().Set("Connection", "close")
		http.Error(w, fmt.Sprintf("the %s form is over %d bytes; open the page again", name, limit), http.StatusRequestEntityTooLarge)
		return false
	}
	http.Error(w, fmt.Sprintf("the %s form could not be read; open the page again", name), http.StatusBadRequest)
	return false
}

// servableName reports whether name (a path below a file server's prefix)
// can name one of the embedded files. The file server answers 500 for a
// name fs.FS refuses (invalid UTF-8, NUL, ".."): such a name is simply not
// one of our files, a 404.
func servableName(name string) bool {
	return utf8.ValidString(name) && !strings.ContainsRune(name, 0) &&
		(name == "" || fs.ValidPath(strings.TrimSuffix(name, "/")))
}

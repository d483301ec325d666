package api

import (
	"fmt"
	"io/fs"
	"net/http"
	"strings"
)

// docsElementsVersion is the Stoplight Elements release embedded under
// web/docs/elements (web/docs/README.md says how to move it).
const docsElementsVersion = "9.0.25"

// docsAssetsPrefix is where the renderer's files are served.
const docsAssetsPrefix = "/docs/assets/"

// docsCSP allows the page nothing from another origin: the renderer's
// script and styles come from this api, and so does the document.
var docsCSP = strings.Join([]string{
	"default-src 'none'",
	"base-uri 'none'",
	"connect-src 'self'",
	"form-action 'none'",
	"frame-ancestors 'none'",
	"img-src 'self' data:",
	"font-src 'self' data:",
	"sandbox allow-same-origin allow-scripts",
	"script-src 'self'",
	"style-src 'self' 'unsafe-inline'",
}, "; ")

// registerDocs serves /docs, the API reference rendered by Stoplight
// Elements, with the renderer embedded in the binary instead of loaded
// from a CDN, so that the page works with no network. Like the document
// itself, it needs no token. Its script (web/static/docs.js) loads the
// document and makes the scheme and host serving the page the server
// variables' defaults, so "try it" calls this api whatever its port.
func (s *Server) registerDocs() {
	assets, err := fs.Sub(webFiles, "web/docs/elements")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix(docsAssetsPrefix, http.FileServerFS(assets))
	s.mux.Handle("GET "+docsAssetsPrefix, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The path names no version: a day's cache, revalidated after.
		if !servableName(strings.TrimPrefix(r.URL.Path, docsAssetsPrefix)) {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=86400")
		files.ServeHTTP(w, r)
	}))
	page := []byte(fmt.Sprintf(`<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8">
    <meta name="referrer" content="no-referrer">
    <meta name="viewport" content="width=device-width, initial-scale=1">
    <meta name="generator" content="Stoplight Elements %s">
    <title>buildrisk-radar API reference</title>
    <link rel="stylesheet" href="%sstyles.min.css">
    <link rel="icon" href="/favicon.ico">
    <script src="%sweb-components.min.js"></script>
    <script src="/static/docs.js" defer></script>
  </head>
  <body style="height: 100vh;">
    <elements-api
      router="hash"
      layout="sidebar"
      tryItCredentialsPolicy="same-origin"
    ></elements-api>
  </body>
</html>
`, docsElementsVersion, docsAssetsPrefix, docsAssetsPrefix))
	s.mux.HandleFunc("GET /docs", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", docsCSP)
		_, _ = w.Write(page)
	})
}

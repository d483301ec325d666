package app

import (
	"net/http"
	"time"
)

// serverTimeouts are the HTTP server timeouts of the api and admin
// listeners: a slow or idle client cannot hold a connection (or a goroutine
// and its buffers) for longer.
type serverTimeouts struct {
	// ReadHeader bounds reading the request line and headers (slowloris).
	ReadHeader time.Duration
	// Read bounds reading the whole request, body included.
	Read time.Duration
	// Write bounds the handler plus writing the answer; it exceeds the
	// database statement and lock timeouts, so a slow query answers 503
	// instead of a dropped connection.
	Write time.Duration
	// Idle bounds a keep-alive connection between requests.
	Idle time.Duration
}

// serverTimeoutsDefault are the timeouts radar serves with.
var serverTimeoutsDefault = serverTimeouts{ReadHeader: 5 * time.Second, Read: 30 * time.Second, Write: 60 * time.Second, Idle: 120 * time.Second}

// maxHeaderBytes bounds a request's headers (net/http's default is 1 MiB).
const maxHeaderBytes = 64 << 10

// newHTTPServer returns the server of the api and admin listeners.
func newHTTPServer(handler http.Handler, t serverTimeouts) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}

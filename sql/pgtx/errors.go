package pgtx

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
)

// NotOwnedCode is the SQLSTATE a fenced statement raises when its
// execution is not owned by the caller's worker under the caller's lease
// epoch: the run lost its ownership (the SQL functions radar_owned and
// execution_owned, migrations 00001 and 00011).
const NotOwnedCode = "BR001"

// IsNotOwned reports whether err is a fenced statement's refusal
// (NotOwnedCode), which rolled back everything sent with it.
func IsNotOwned(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == NotOwnedCode
}

// IsRetryable reports whether err is a serialization failure (40001) or a
// deadlock (40P01), the conflicts a short retry resolves.
func IsRetryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// transientCodes are the SQLSTATEs of a database that is briefly away or
// busy rather than of a wrong statement: admin shutdown (57P01, a fast
// restart), crash shutdown (57P02), cannot connect now (57P03, starting up
// or shutting down), serialization failure (40001), deadlock (40P01),
// statement timeout or cancel (57014), lock timeout (55P03), too many
// connections (53300), and the connection exceptions (class 08).
var transientCodes = map[string]bool{
	"57P01": true, "57P02": true, "57P03": true,
	"40001": true, "40P01": true,
	"57014": true, "55P03": true, "53300": true,
}

// ProviderError is the provider side of the error classification: an error
// from calling a provider or reading its answer (upstream.CallError). Its
// retries are the provider client's; IsTransient is false for any error
// chain that holds one, so a provider's broken answer is never retried as a
// database outage nor reported as one.
type ProviderError interface {
	error
	// ProviderName names the provider whose answer failed.
	ProviderName() string
}

// IsTransient reports whether err is a database error that waiting and
// trying again can cure: a server that restarts, refuses or resets
// connections, or times a statement out, and the conflicts of IsRetryable.
// It is THE classification of transient database errors: the worker retries
// these inside its fencing window, and the API answers them with 503 and
// Retry-After instead of 500 (a pool exhausted until the call's deadline,
// a lock_timeout, a database restarting or gone).
//
// A deadline of the caller's context counts (a call that timed out), a
// cancellation does not (the caller gave up), and neither does an HTTP
// client error nor any error chain holding a ProviderError (a provider, not
// the database, even when a network error or an unexpected EOF from
// reading its answer lies underneath).
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var urlErr *url.Error
	var providerErr ProviderError
	if errors.As(err, &urlErr) || errors.As(err, &providerErr) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08: connection exceptions; class 53: insufficient resources
		// (too many connections, out of memory or disk).
		return transientCodes[pgErr.Code] || len(pgErr.Code) == 5 && (pgErr.Code[:2] == "08" || pgErr.Code[:2] == "53")
	}
	if errors.Is(err, puddle.ErrClosedPool) {
		return true // a pool closed under the call (a process shutting down)
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr):
		return true
	case errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err):
		return true
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	// A connection the server closed under a query ("conn closed") is safe
	// to retry by pgx's own judgement.
	return pgconn.SafeToRetry(err)
}

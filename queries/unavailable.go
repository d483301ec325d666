package queries

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsUnavailable reports whether err says the database cannot serve the
// call right now, rather than that the call is wrong: the server is
// unreachable, restarting or shutting down, has no connection slot, or
// cancelled the statement on statement_timeout or lock_timeout; the pool is
// closed; or the caller's deadline passed while waiting (for a pooled
// connection, a lock or the answer). Such an error is worth retrying later:
// the API answers it with 503 and Retry-After instead of 500.
//
// A cancelled context (the caller went away) is not unavailability.
func IsUnavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "57014", // query_canceled: statement_timeout
			pgErr.Code == "55P03",                // lock_not_available: lock_timeout
			pgErr.Code == "40001",                // serialization_failure (after the retries)
			pgErr.Code == "40P01",                // deadlock_detected (after the retries)
			strings.HasPrefix(pgErr.Code, "08"),  // connection exceptions
			strings.HasPrefix(pgErr.Code, "53"),  // insufficient resources: too many connections, out of memory or disk
			strings.HasPrefix(pgErr.Code, "57P"): // admin/crash shutdown, cannot connect now
			return true
		}
		return false
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	var opErr *net.OpError
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || errors.As(err, &opErr) ||
		pgconn.Timeout(err) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		strings.Contains(err.Error(), "conn closed") || strings.Contains(err.Error(), "closed pool")
}

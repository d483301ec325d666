package pgtx_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/sql/pgtx"
)

// IsTransient: what waiting can cure (a restart, a refused or reset
// connection, a timeout, a conflict) and nothing else: not a wrong
// statement, not a cancellation, not a provider's HTTP error.
func TestIsTransient(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("commit of chunk c01: error beginning transaction: %w", err) }
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"AdminShutdown57P01":     {&pgconn.PgError{Code: "57P01"}, true},
		"CannotConnectNow57P03":  {wrap(&pgconn.PgError{Code: "57P03"}), true},
		"Serialization40001":     {&pgconn.PgError{Code: "40001"}, true},
		"Deadlock40P01":          {&pgconn.PgError{Code: "40P01"}, true},
		"StatementTimeout57014":  {&pgconn.PgError{Code: "57014"}, true},
		"LockTimeout55P03":       {&pgconn.PgError{Code: "55P03"}, true},
		"ConnectionFailure08006": {&pgconn.PgError{Code: "08006"}, true},
		"ConnectionRefused":      {wrap(refused), true},
		"ConnectionReset":        {wrap(syscall.ECONNRESET), true},
		"UnexpectedEOF":          {wrap(io.ErrUnexpectedEOF), true},
		"Deadline":               {wrap(context.DeadlineExceeded), true},
		"UniqueViolation23505":   {&pgconn.PgError{Code: "23505"}, false},
		"SyntaxError42601":       {&pgconn.PgError{Code: "42601"}, false},
		"NoRows":                 {pgx.ErrNoRows, false},
		"Cancelled":              {wrap(context.Canceled), false},
		"ProviderDialRefused":    {&url.Error{Op: "Get", URL: "http://provider", Err: refused}, false},
		"Other":                  {errors.New("job not registered"), false},
		"Nil":                    {nil, false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, pgtx.IsTransient(tc.err), "%v", tc.err)
		})
	}

	t.Run("RealRefusedConnection", func(t *testing.T) {
		t.Parallel()
		listener, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := listener.Addr().String()
		require.NoError(t, listener.Close()) // nothing listens there now
		_, err = pgx.Connect(context.Background(), "postgres://x@"+addr+"/x?sslmode=disable&connect_timeout=2")
		require.Error(t, err)
		require.True(t, pgtx.IsTransient(err), "%v", err)
	})
}

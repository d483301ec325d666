package pgtx_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/sql/pgtx"
)

func TestIsTransient_APICases(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]bool{
		"57014": true, "55P03": true, "57P01": true, "57P03": true, "53300": true, "08006": true, "40001": true,
		"23505": false, "22P02": false, "42P01": false, "42501": false,
	} {
		err := fmt.Errorf("error listing: %w", &pgconn.PgError{Code: code})
		require.Equal(t, want, pgtx.IsTransient(err), code)
	}
	require.True(t, pgtx.IsTransient(fmt.Errorf("acquire: %w", context.DeadlineExceeded)))
	require.False(t, pgtx.IsTransient(context.Canceled))
	require.False(t, pgtx.IsTransient(pgx.ErrNoRows))
	require.False(t, pgtx.IsTransient(errors.New("boom")))
	require.False(t, pgtx.IsTransient(nil))
}

// A real refused connection is transient.
func TestIsTransient_RefusedByAPI(t *testing.T) {
	t.Parallel()
	_, err := pgx.Connect(context.Background(), "postgres://x@127.0.0.1:1/db?connect_timeout=2")
	require.Error(t, err)
	require.True(t, pgtx.IsTransient(err), "%v", err)
}

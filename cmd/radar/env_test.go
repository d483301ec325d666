package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/app"
)

// The API refuses to start without tokens unless explicitly insecure, and
// api/worker refuse to start without DATABASE_URL.
func TestEnv_RolesRefuseToStart(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Setenv("BUILDRISK_API_TOKENS", "")
	require.ErrorContains(t, withEnv(t.Context(), app.RunAPI), "DATABASE_URL")
	require.ErrorContains(t, withEnv(t.Context(), app.RunWorker), "DATABASE_URL")
	t.Setenv("DATABASE_URL", "postgres://nowhere/x")
	require.ErrorContains(t, withEnv(t.Context(), app.RunAPI), "BUILDRISK_API_TOKENS")
}

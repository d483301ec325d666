package apptest

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/sql/pgtest"
)

// AppLoginRole is the login role the test systems' api and workers connect
// as: a member of the application role the least-privilege migration
// grants (radar_app), like radar_api and radar_worker in deploy/.
const AppLoginRole = "radar_test_app"

// APILoginRole is the login role the test systems' api connects as: a
// member of the api's own role (radar_app_api), like radar_api in deploy/.
const APILoginRole = "radar_test_api"

// AppRoleClusters records the clusters (host:port) where AppLoginRole
// exists: the package's shared cluster, and any private cluster a test
// starts for itself (the outage tests).
var AppRoleClusters sync.Map

// AppURL returns ownerURL with the user replaced by AppLoginRole, creating
// that role in ownerURL's cluster the first time: with the harness's admin
// connection in the package's cluster, with the owner's own (a superuser)
// in a private one.
func AppURL(t testing.TB, ownerURL string) string {
	t.Helper()
	u, err := url.Parse(ownerURL)
	require.NoError(t, err)
	if _, done := AppRoleClusters.Load(u.Host); !done {
		adminURL := pgtest.AdminURL(t)
		if admin, err := url.Parse(adminURL); err == nil && admin.Host != u.Host {
			adminURL = ownerURL
		}
		conn, err := pgx.Connect(context.Background(), adminURL)
		require.NoError(t, err)
		defer conn.Close(context.Background())
		for _, stmt := range []string{`CREATE ROLE ` + AppLoginRole + ` LOGIN IN ROLE radar_app`, `CREATE ROLE ` + APILoginRole + ` LOGIN IN ROLE radar_app_api`} {
			_, err = conn.Exec(context.Background(), stmt)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "42710" { // duplicate_object: kept from an earlier run, or a parallel test
				require.NoError(t, err)
			}
		}
		AppRoleClusters.Store(u.Host, true)
	}
	u.User = url.User(AppLoginRole)
	return u.String()
}

// APIURL returns appURL with the user replaced by APILoginRole.
func APIURL(t testing.TB, ownerURL string) string {
	t.Helper()
	u, err := url.Parse(AppURL(t, ownerURL))
	require.NoError(t, err)
	u.User = url.User(APILoginRole)
	return u.String()
}

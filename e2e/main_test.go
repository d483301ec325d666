// Package e2e_test holds the whole-system scenarios: each test builds the
// service with internal/apptest (a private database, the fake upstream, the
// api over HTTP and workers on demand) and drives it as a client would.
// The tests of a package below (queue/worker, queue/batch, ...) build only
// that package over a pgtest database.
package e2e_test

import (
	"testing"

	"github.com/buildrisk/radar/sql/pgtest"
)

// TestMain gives the package's tests their private PostgreSQL (sql/pgtest).
func TestMain(m *testing.M) { pgtest.Main(m) }

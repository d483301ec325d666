package worker_test

import (
	"testing"

	"github.com/buildrisk/radar/sql/pgtest"
)

// TestMain gives the package's tests their private PostgreSQL (sql/pgtest).
func TestMain(m *testing.M) { pgtest.Main(m) }

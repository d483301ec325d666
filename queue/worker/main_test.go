package worker_test

import (
	"testing"

	"github.com/buildrisk/radar/sql/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

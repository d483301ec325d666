package catalog_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
)

// The River kind of a request's args is stored in river_job rows: renaming
// the Go type must never change it.
func TestRequestArgs_KindIsStored(t *testing.T) {
	t.Parallel()
	require.Equal(t, "buildrisk_run", catalog.RequestArgs{}.Kind())
}

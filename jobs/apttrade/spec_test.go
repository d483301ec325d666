package apttrade_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/jobs/apttrade"
)

func TestAptTrade_ValidateAndEstimate(t *testing.T) {
	t.Parallel()
	spec := apttrade.Spec()
	ok := func(raw string) *catalog.Params {
		p, err := spec.Decode([]byte(raw))
		require.NoError(t, err, raw)
		return p
	}
	bad := func(raw, field string) {
		_, err := spec.Decode([]byte(raw))
		var pe *catalog.ParamError
		require.ErrorAs(t, err, &pe, raw)
		require.Equal(t, field, pe.Field, raw)
	}
	p := ok(`{"regions":["11140","11110","11140"],"from":"2025-01","to":"2025-03"}`)
	require.Equal(t, 6, p.EstimatedCalls, "duplicates removed: 2 regions × 3 months")
	require.JSONEq(t, `{"regions":["11110","11140"],"from":"2025-01","to":"2025-03"}`, string(p.Canonical))
	require.Equal(t, catalog.ParamsHash(p.Canonical), catalog.ParamsHash(ok(`{"to":"2025-03","from":"2025-01","regions":["11110","11140"]}`).Canonical),
		"canonical: order of keys and regions does not matter")
	require.Equal(t, 120, ok(`{"regions":["11110"],"from":"2016-01","to":"2025-12"}`).EstimatedCalls)

	bad(`{"regions":[],"from":"2025-01","to":"2025-03"}`, "params.regions")
	bad(`{"regions":["11110","abcde"],"from":"2025-01","to":"2025-03"}`, "params.regions[1]")
	bad(`{"regions":["11110"],"from":"2025-1","to":"2025-03"}`, "params.from")
	bad(`{"regions":["11110"],"from":"2025-01"}`, "params.to")
	bad(`{"regions":["11110"],"from":"2025-04","to":"2025-03"}`, "params.from")
	bad(`{"regions":["11110"],"from":"2015-12","to":"2025-12"}`, "params.to")
	bad(`{"regions":["11110"],"from":"2025-01","to":"2025-03","x":1}`, "params.x")
	bad(`{"regions":[11110],"from":"2025-01","to":"2025-03"}`, "params.regions[0]")
	bad(`{"regions":["11110"],"from":"0000-01","to":"2025-03"}`, "params.from")
	bad(`{"regions":["11110"],"from":"2025-01","to":"9999-12"}`, "params.to")
	bad(`{"regions":["11110"],"from":"2005-12","to":"2006-01"}`, "params.from")
	bad(`{"regions":[`+strings.Repeat(`"11110",`, 500)+`"11110"],"from":"2025-01","to":"2025-03"}`, "params.regions")
	bad(`{"regions":["11110"]`, "params")
}

// Package jobstest is test support for job definitions: the table test of
// a definition's params that every job package's spec_test.go runs.
package jobstest

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
)

// ParamCase is one Decode of a table test: want a field error (BadField),
// or else the canonical params and the catalog's estimate.
type ParamCase struct {
	Name      string
	Raw       string
	BadField  string
	Canonical string
	Estimate  int
}

// RunParamCases decodes each case's Raw with def, in a parallel subtest
// named after the case, and checks the outcome it names.
func RunParamCases(t *testing.T, def catalog.Definition, cases []ParamCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			p, err := def.Decode(json.RawMessage(tc.Raw))
			if tc.BadField != "" {
				var pe *catalog.ParamError
				require.ErrorAs(t, err, &pe, tc.Raw)
				require.Equal(t, tc.BadField, pe.Field, pe.Message)
				return
			}
			require.NoError(t, err, tc.Raw)
			require.JSONEq(t, tc.Canonical, string(p.Canonical))
			require.Equal(t, tc.Estimate, p.EstimatedCalls)
		})
	}
}

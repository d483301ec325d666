package catalog_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
)

// spanParams are the params of the specs these tests build: a bounded
// number of days.
type spanParams struct {
	Days int `json:"days"`
}

func spanSpec(name, provider string) *catalog.Spec[spanParams] {
	return &catalog.Spec[spanParams]{
		JobName: name, ProviderName: provider, ExampleValue: spanParams{Days: 2},
		Validate: func(p *spanParams) error {
			if p.Days < 1 {
				return &catalog.ParamError{Field: "params.days", Message: "at least 1"}
			}
			return nil
		},
		Estimate:  func(p *spanParams) int { return p.Days },
		Scheduled: func(time.Time) spanParams { return spanParams{Days: 1} },
	}
}

func TestCatalog_Lookup(t *testing.T) {
	t.Parallel()
	c := catalog.NewCatalog(spanSpec("span", "MOLIT"), spanSpec("local", ""))
	require.Equal(t, []string{"span", "local"}, c.Names(), "catalog order")
	def, ok := c.Lookup("span")
	require.True(t, ok)
	require.Equal(t, []string{"BUILDRISK_KEY_MOLIT"}, def.RequiredKeys())
	def, ok = c.Lookup("local")
	require.True(t, ok)
	require.Empty(t, def.RequiredKeys(), "a job without a provider needs no key")
	_, ok = c.Lookup("nope")
	require.False(t, ok)
	require.Panics(t, func() { catalog.NewCatalog(spanSpec("span", ""), spanSpec("span", "")) })
}

// A Spec decodes strictly, validates, and answers canonical params with
// the estimate; its scheduled params are the Scheduled function's.
func TestSpec_Decode(t *testing.T) {
	t.Parallel()
	spec := spanSpec("span", "")
	p, err := spec.Decode(json.RawMessage(`{"days":3}`))
	require.NoError(t, err)
	require.JSONEq(t, `{"days":3}`, string(p.Canonical))
	require.Equal(t, 3, p.EstimatedCalls)
	require.Equal(t, 3, p.Value.(*spanParams).Days)

	for raw, field := range map[string]string{`{"days":0}`: "params.days", `{"days":1,"x":1}`: "params.x", `{"days":"1"}`: "params.days", `[`: "params"} {
		_, err := spec.Decode(json.RawMessage(raw))
		var pe *catalog.ParamError
		require.ErrorAs(t, err, &pe, raw)
		require.Equal(t, field, pe.Field, raw)
	}
	require.JSONEq(t, `{"days":1}`, string(spec.ScheduledParams(time.Now())))
	_, err = spec.Params(json.RawMessage(`{"days":0}`))
	require.ErrorContains(t, err, "error decoding span params")
}

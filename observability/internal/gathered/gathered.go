// Package gathered reads one metric's value back from a Prometheus
// gatherer, summed over the samples that carry given labels. The test
// providers (observabilitytest, and observability's own tests) read what
// their code counted through it.
package gathered

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// ErrUnknown is returned by [Value] for a name that is neither gathered nor
// known, which almost always means the caller misspelled it.
var ErrUnknown = errors.New("metric unknown")

// Value gathers g and returns the sum of the samples of the metric named
// name (as scraped) whose labels include every pair of labels; a nil map
// matches every sample. For a histogram, name may be its base name or
// base_count (the number of observations) or base_sum (their sum).
//
// A metric listed in known that hasn't been recorded yet has the value 0.
// Any other name not gathered returns an error wrapping [ErrUnknown].
func Value(g prometheus.Gatherer, known []string, name string, labels map[string]string) (float64, error) {
	families, err := g.Gather()
	if err != nil {
		return 0, fmt.Errorf("error gathering metrics: %w", err)
	}

	base, part := name, ""
	for _, suffix := range []string{"_count", "_sum"} {
		if trimmed, ok := strings.CutSuffix(name, suffix); ok {
			base, part = trimmed, suffix
		}
	}

	for _, family := range families {
		switch family.GetName() {
		case name:
			return sumSamples(family, labels, ""), nil
		case base:
			if family.GetType() == dto.MetricType_HISTOGRAM {
				return sumSamples(family, labels, part), nil
			}
		}
	}

	if slices.Contains(known, name) || slices.Contains(known, base) {
		return 0, nil
	}
	return 0, fmt.Errorf("error reading metric %q: %w", name, ErrUnknown)
}

// sumSamples adds up the values of the family's metrics carrying labels. For
// histograms, part "_sum" selects the sum and anything else the count.
func sumSamples(family *dto.MetricFamily, labels map[string]string, part string) float64 {
	var total float64
	for _, m := range family.GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			total += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			total += m.GetGauge().GetValue()
		case m.GetHistogram() != nil && part == "_sum":
			total += m.GetHistogram().GetSampleSum()
		case m.GetHistogram() != nil:
			total += float64(m.GetHistogram().GetSampleCount())
		case m.GetUntyped() != nil:
			total += m.GetUntyped().GetValue()
		}
	}
	return total
}

// hasLabels reports whether m carries every pair of want.
func hasLabels(m *dto.Metric, want map[string]string) bool {
	found := 0
	for _, pair := range m.GetLabel() {
		if v, ok := want[pair.GetName()]; ok {
			if v != pair.GetValue() {
				return false
			}
			found++
		}
	}
	return found == len(want)
}

package observability

import (
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Instruments whose attribute sets attrSets keeps.
const (
	hotExternalCalls = iota + 1
	hotFanoutInflight
	hotItems
)

// attrSetsMax bounds attrSets: past it a set is built for the call and not
// kept (the values are bounded — job names, providers, outcomes — so this
// only guards against a caller minting values).
const attrSetsMax = 1024

// attrSetKey names one attribute set of one instrument.
type attrSetKey struct {
	instrument int
	a, b       string
}

// attrSets keeps the options (metric.WithAttributeSet, in a slice of its
// own so that passing it allocates no variadic slice either) of each
// attribute set a hot instrument has used: metric.WithAttributes sorts,
// deduplicates and hashes its attributes into a new set at every call,
// which the CPU profile of a 0 ms creditEval run showed at ≈ 3–4 % of the
// worker's time (three measurements per provider call).
type attrSets struct {
	mu sync.RWMutex
	m  map[attrSetKey][]metric.AddOption
}

// get returns the kept option of key.
func (c *attrSets) get(key attrSetKey) ([]metric.AddOption, bool) {
	c.mu.RLock()
	opt, ok := c.m[key]
	c.mu.RUnlock()
	return opt, ok
}

// put builds key's option from kvs, keeps it while there is room, and
// returns it.
func (c *attrSets) put(key attrSetKey, kvs ...attribute.KeyValue) []metric.AddOption {
	opt := []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[attrSetKey][]metric.AddOption)
	}
	if len(c.m) < attrSetsMax {
		c.m[key] = opt
	}
	c.mu.Unlock()
	return opt
}

package catalog

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"time"
)

// Params is a request's params after decoding and validation.
type Params struct {
	// Value is a pointer to the job's params struct (for example
	// *apttrade.Params).
	Value any
	// Canonical is Value marshalled back: field order fixed, lists
	// normalized. Equal work has equal canonical JSON.
	Canonical json.RawMessage
	// EstimatedCalls is how many external calls the whole run would make.
	EstimatedCalls int
}

// Definition is one job of the catalog.
type Definition interface {
	// Name is the job's name in URLs, the CLI and metrics.
	Name() string
	// Description says what the job does, for the job list and OpenAPI.
	Description() string
	// Provider is the external provider the job calls ("" when none).
	Provider() string
	// RequiredKeys names the environment variables a worker needs to run it.
	RequiredKeys() []string
	// Chunking says what one chunk of the job is.
	Chunking() string
	// ParamsType is the params struct type (the API's schema comes from it).
	ParamsType() reflect.Type
	// Example is an example params value.
	Example() any
	// Decode strictly decodes and validates raw params; errors are
	// *ParamError naming the field.
	Decode(raw json.RawMessage) (*Params, error)
	// Next is the job a COMPLETED execution chains to ("" when none).
	Next() string
	// Schedule is the default cron schedule ("" when none).
	Schedule() string
	// ScheduledParams are the params of a request a schedule makes at now.
	ScheduledParams(now time.Time) json.RawMessage
	// Coverage is the job's coverage definition; nil when the job has none
	// (its spec's doc says why).
	Coverage() *Coverage
}

// Spec is the generic Definition every catalog job is made of; each job
// package builds its own in its spec.go.
type Spec[P any] struct {
	JobName         string
	Desc            string
	ProviderName    string
	ChunkDesc       string
	ExampleValue    P
	NextJob         string
	DefaultSchedule string
	// Validate checks and normalizes the decoded params in place, returning
	// a *ParamError naming the field.
	Validate func(p *P) error
	// Estimate returns the external calls of a run with valid params.
	Estimate func(p *P) int
	// Scheduled returns the params of a scheduled request at now; nil
	// means the zero params ({}).
	Scheduled func(now time.Time) P
	// CoverageDef is the job's coverage definition (nil: none, and the
	// spec's doc says why).
	CoverageDef *Coverage
}

// Coverage implements Definition.
func (s *Spec[P]) Coverage() *Coverage { return s.CoverageDef }

// Name implements Definition.
func (s *Spec[P]) Name() string { return s.JobName }

// Description implements Definition.
func (s *Spec[P]) Description() string { return s.Desc }

// Provider implements Definition.
func (s *Spec[P]) Provider() string { return s.ProviderName }

// RequiredKeys implements Definition.
func (s *Spec[P]) RequiredKeys() []string {
	if s.ProviderName == "" {
		return []string{}
	}
	return []string{"BUILDRISK_KEY_" + s.ProviderName}
}

// Chunking implements Definition.
func (s *Spec[P]) Chunking() string { return s.ChunkDesc }

// ParamsType implements Definition.
func (s *Spec[P]) ParamsType() reflect.Type { return reflect.TypeFor[P]() }

// Example implements Definition.
func (s *Spec[P]) Example() any { return s.ExampleValue }

// Next implements Definition.
func (s *Spec[P]) Next() string { return s.NextJob }

// Schedule implements Definition.
func (s *Spec[P]) Schedule() string { return s.DefaultSchedule }

// ScheduledParams implements Definition.
func (s *Spec[P]) ScheduledParams(now time.Time) json.RawMessage {
	var p P
	if s.Scheduled != nil {
		p = s.Scheduled(now)
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return json.RawMessage("{}")
	}
	return raw
}

// Decode implements Definition.
func (s *Spec[P]) Decode(raw json.RawMessage) (*Params, error) {
	p := new(P)
	if err := DecodeStrict(raw, p, "params"); err != nil {
		return nil, err
	}
	if s.Validate != nil {
		if err := s.Validate(p); err != nil {
			return nil, err
		}
	}
	canonical, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("error encoding params: %w", err)
	}
	estimate := 0
	if s.Estimate != nil {
		estimate = s.Estimate(p)
	}
	return &Params{Value: p, Canonical: canonical, EstimatedCalls: estimate}, nil
}

// Params decodes and validates raw params into the job's params type; job
// packages call it on the canonical params a run carries.
func (s *Spec[P]) Params(raw json.RawMessage) (*P, error) {
	params, err := s.Decode(raw)
	if err != nil {
		return nil, fmt.Errorf("error decoding %s params: %w", s.JobName, err)
	}
	return params.Value.(*P), nil
}

// Catalog is the set of jobs a process knows. The service's catalog is
// internal/jobset's (jobset.Catalog), built from its one list of jobs.
type Catalog struct {
	defs []Definition
}

// NewCatalog returns a catalog of defs in the given order. Panics on a
// duplicate name: that is a programming error.
func NewCatalog(defs ...Definition) *Catalog {
	seen := map[string]bool{}
	for _, d := range defs {
		if seen[d.Name()] {
			panic(fmt.Sprintf("jobs: duplicate job %q", d.Name()))
		}
		seen[d.Name()] = true
	}
	return &Catalog{defs: slices.Clone(defs)}
}

// All returns the definitions in catalog order.
func (c *Catalog) All() []Definition { return slices.Clone(c.defs) }

// Lookup returns the definition named name.
func (c *Catalog) Lookup(name string) (Definition, bool) {
	for _, d := range c.defs {
		if d.Name() == name {
			return d, true
		}
	}
	return nil, false
}

// Names returns the job names in catalog order.
func (c *Catalog) Names() []string {
	names := make([]string, len(c.defs))
	for i, d := range c.defs {
		names[i] = d.Name()
	}
	return names
}

// Package observability holds buildrisk-radar's telemetry plumbing: the
// OpenTelemetry meter and tracer providers with their Prometheus and OTLP
// exporters ([NewProviders]), the one list of metric instruments every other
// package records through ([Instruments], [MetricNames]), and the structured
// logger that stamps each line with its trace ([NewLogger], [Summary]).
//
// # Why one list
//
// The metric names are a contract: alert rules, dashboards and black-box
// tests scrape them by name. Every instrument is therefore created in
// instruments.go and recorded through a method whose arguments are the
// attributes it allows, so a caller can neither misspell a name nor attach an
// unbounded attribute (a request id, a worker id) that would explode the
// number of series.
//
// # Count, don't spam
//
// The batch this service replaces lost events for 13 days while its logs
// held millions of identical stack traces. Repeated events are counted with
// an instrument and summarised once per interval with [Summary]; they are
// never logged one line per item.
//
// # What this package must not do
//
// It is a leaf but for the vocabulary (radartype, whose values its
// enumerated attributes take): it imports no other package of this module,
// reads no BUILDRISK_* variable (only the standard OTEL_* ones, through the
// OTel SDK), and never pushes telemetry anywhere unless OTLP export is
// configured explicitly.
package observability

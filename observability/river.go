package observability

// RiverMetricNames lists the Prometheus names, as scraped, of River's
// metrics that the alert rules and the dashboard read. otelriver exports
// them from every worker: river_* are its own, messaging_* the
// OpenTelemetry semantic-convention ones it adds with
// MiddlewareConfig.EnableSemanticMetrics. Histograms are listed by their
// base name, as in [MetricNames]; a worker test checks each is served
// after a job ran.
var RiverMetricNames = []string{
	MetricMessagingProcessDuration,
	MetricRiverWorkDuration,
}

// RiverHistogramNames lists the names in [RiverMetricNames] that are
// histograms.
var RiverHistogramNames = []string{
	MetricMessagingProcessDuration,
	MetricRiverWorkDuration,
}

// River's metric names as scraped.
const (
	// MetricMessagingProcessDuration is messaging.process.duration: how long
	// a job took to work (attributes messaging.operation.name "work" and
	// messaging.system "river").
	MetricMessagingProcessDuration = "messaging_process_duration_seconds"
	// MetricRiverWorkDuration is river.work_duration_histogram: the same
	// duration by job kind, queue and status.
	MetricRiverWorkDuration = "river_work_duration_histogram_seconds"
)

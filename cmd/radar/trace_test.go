package main

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
)

// otlpReceiver is a minimal OTLP/HTTP trace receiver.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body := io.Reader(req.Body)
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		body = gz
	}
	raw, _ := io.ReadAll(body)
	if req.URL.Path == "/v1/traces" {
		var export coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(raw, &export); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		r.mu.Lock()
		for _, rs := range export.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, one trace links the API's POST to
// the worker's chunk spans (the trace context travels in River metadata).
func TestTrace_PostToChunksInOneTrace(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := newTestSystem(t, nil)
	receiver := &otlpReceiver{}
	collector := httptest.NewServer(receiver)
	defer collector.Close()

	dev := startRadar(t, bin, s.processEnv(map[string]string{
		"BUILDRISK_HTTP_ADDR":         "127.0.0.1:0",
		"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL,
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_TRACES_EXPORTER":        "otlp",
		"OTEL_METRICS_EXPORTER":       "none",
		"OTEL_BSP_SCHEDULE_DELAY":     "100",
	}), "dev")
	m := dev.waitLine(t, regexp.MustCompile(`API\s+(http://\S+)`))
	dev.waitLine(t, regexp.MustCompile(`Ctrl-C drains`))
	apiURL := strings.Replace(m[1], "localhost", "127.0.0.1", 1)

	req, _ := http.NewRequest(http.MethodPost, apiURL+"/v1/jobs/aptTrade/requests", strings.NewReader(aptTradeBody([]string{"11110"}, "2025-01", "2025-02")))
	req.Header.Set("Authorization", "Bearer "+testOperatorToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	deadline := time.Now().Add(30 * time.Second)
	for s.count("SELECT count(*) FROM job_request WHERE status = 'DONE'") == 0 {
		require.True(t, time.Now().Before(deadline))
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, dev.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, 0, dev.wait(t, 60*time.Second), "telemetry is flushed after drain")

	receiver.mu.Lock()
	defer receiver.mu.Unlock()
	byTrace := map[string][]*tracepb.Span{}
	var chunkTrace string
	for _, span := range receiver.spans {
		id := hex.EncodeToString(span.TraceId)
		byTrace[id] = append(byTrace[id], span)
		if span.Name == "buildrisk.chunk" {
			chunkTrace = id
		}
	}
	require.NotEmpty(t, chunkTrace, "no chunk spans exported (%d spans)", len(receiver.spans))
	var names []string
	serverSpan, clientSpan := false, false
	for _, span := range byTrace[chunkTrace] {
		names = append(names, span.Name)
		serverSpan = serverSpan || span.Kind == tracepb.Span_SPAN_KIND_SERVER
		clientSpan = clientSpan || span.Kind == tracepb.Span_SPAN_KIND_CLIENT
	}
	require.True(t, serverSpan, "the POST's server span is in the chunks' trace: %v", names)
	require.True(t, clientSpan, "provider calls are client spans in the same trace: %v", names)
	require.Contains(t, names, "buildrisk.execution")
}

// Provider calls are client spans only when spans are recorded: otherwise
// the wrapper was 1.4 of 3.5 CPU-seconds of the call path at fan-out 64
// (BENCHMARKS.md) for spans nobody reads.
func TestProviderTracing_OnlyWhenSpansAreRecorded(t *testing.T) {
	require.Nil(t, providerTracing(&observability.Providers{}))
	providers, _ := observabilitytest.NewProviders()
	wrap := providerTracing(providers)
	require.NotNil(t, wrap)
	require.NotNil(t, wrap(http.DefaultTransport))
}

package main

import (
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// With OTEL_EXPORTER_OTLP_ENDPOINT set, one trace links the API's POST to
// the worker's chunk spans (the trace context travels in River metadata).
func TestTrace_PostToChunksInOneTrace(t *testing.T) {
	t.Parallel()
	bin := buildRadar(t)
	s := apptest.New(t, nil)
	receiver := &apptest.OtlpReceiver{}
	collector := httptest.NewServer(receiver)
	defer collector.Close()

	dev := startRadar(t, bin, s.ProcessEnv(map[string]string{
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

	req, _ := http.NewRequest(http.MethodPost, apiURL+"/v1/jobs/aptTrade/requests", strings.NewReader(apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-02")))
	req.Header.Set("Authorization", "Bearer "+apptest.OperatorToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	deadline := time.Now().Add(30 * time.Second)
	for s.Count("SELECT count(*) FROM job_request WHERE status = 'DONE'") == 0 {
		require.True(t, time.Now().Before(deadline))
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, dev.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, 0, dev.Wait(t, 60*time.Second), "telemetry is flushed after drain")

	receiver.Mu.Lock()
	defer receiver.Mu.Unlock()
	byTrace := map[string][]*tracepb.Span{}
	var chunkTrace string
	for _, span := range receiver.Spans {
		id := hex.EncodeToString(span.TraceId)
		byTrace[id] = append(byTrace[id], span)
		if span.Name == "buildrisk.chunk" {
			chunkTrace = id
		}
	}
	require.NotEmpty(t, chunkTrace, "no chunk spans exported (%d spans)", len(receiver.Spans))
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

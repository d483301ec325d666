package apptest

import (
	"compress/gzip"
	"io"
	"net/http"
	"sync"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// OtlpReceiver is a minimal OTLP/HTTP trace receiver.
type OtlpReceiver struct {
	Mu    sync.Mutex
	Spans []*tracepb.Span
}

func (r *OtlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
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
		r.Mu.Lock()
		for _, rs := range export.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.Spans = append(r.Spans, ss.Spans...)
			}
		}
		r.Mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

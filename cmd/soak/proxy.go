package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// providerPaths names the provider endpoints by their request paths (the
// contract's provider paths, which the fake upstream serves and counts under
// these names).
var providerPaths = map[string]string{
	"/1613000/RTMSDataSvcAptTrade/getRTMSDataSvcAptTrade": "aptTrade",
	"/api/corpCode.xml": "corpCode",
	"/api/list.json":    "filingList",
	"/1160100/service/GetStockSecuritiesInfoService/getStockPriceInfo": "stockPrice",
	"/credit/v1/grades": "creditLookup",
	"/credit/v1/crawl":  "creditFallback",
}

// keyParams are the query parameters that carry provider keys; the proxy
// leaves them out of what it records.
var keyParams = map[string]bool{"serviceKey": true, "crtfc_key": true, "apiKey": true}

// recordingProxy forwards the workers' provider calls to the fake upstream
// and records each one (when it arrived, what it asked, what came back).
// Every call is forwarded to the end even when the caller goes away (a
// killed worker), so the proxy's record and the fake's own counts agree.
type recordingProxy struct {
	target string
	ev     *Evidence
	client *http.Client

	// inflight counts the calls forwarded and not yet answered.
	inflight atomic.Int64

	// trickle, while set, sends the answers' bodies one byte a second (the
	// slow-provider fault): a provider that does answer, too slowly for
	// anything but the caller's own timeout to end the call.
	trickle atomic.Bool

	mu sync.Mutex
	// inflightBy counts the calls in flight by endpoint.
	inflightBy map[string]int
}

// callsInFlight returns the endpoints with calls in flight.
func (p *recordingProxy) callsInFlight() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for endpoint, n := range p.inflightBy {
		if n > 0 {
			out = append(out, endpoint)
		}
	}
	sort.Strings(out)
	return out
}

// track counts a call of endpoint in flight until the returned func runs.
func (p *recordingProxy) track(endpoint string) func() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inflightBy == nil {
		p.inflightBy = map[string]int{}
	}
	p.inflightBy[endpoint]++
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.inflightBy[endpoint]--
	}
}

func (p *recordingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	p.inflight.Add(1)
	defer p.inflight.Add(-1)
	endpoint, ok := providerPaths[r.URL.Path]
	if !ok {
		http.Error(w, "soak proxy: unknown provider path "+r.URL.Path, http.StatusNotFound)
		return
	}
	defer p.track(endpoint)()
	params := map[string]string{}
	for k, v := range r.URL.Query() {
		if !keyParams[k] && len(v) > 0 {
			params[k] = v[0]
		}
	}
	// The call goes on when the caller goes away before the answer's
	// headers (the fake counts it either way); once the body streams, a
	// caller that gives up ends the upstream read too, so a body that
	// hangs (the hang-body fault) does not keep the call in flight.
	outCtx, cancelOut := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancelOut()
	out, err := http.NewRequestWithContext(outCtx, r.Method, p.target+r.URL.RequestURI(), nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	resp, err := p.client.Do(out)
	call := UpstreamCall{At: at, Endpoint: endpoint, Params: params}
	if err != nil {
		p.ev.addCall(call)
		http.Error(w, "soak proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	call.Status = resp.StatusCode
	stop := context.AfterFunc(r.Context(), cancelOut)
	defer stop()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	// The headers go at once, as the fake sent them: a caller that then
	// waits on a slow body has its answer's status, and a body that fails
	// before its first byte fails as a body, not as a connection closed
	// without an answer (which the caller's transport would replay).
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
	// The body is streamed as it comes, so the caller sees what the
	// provider sent: a body cut short arrives cut short (the connection is
	// then closed), a body that hangs hangs.
	_, err = io.Copy(flushWriter{w}, trickleReader{ctx: r.Context(), r: resp.Body, on: &p.trickle})
	call.BodyBroken = err != nil
	p.ev.addCall(call)
	if err != nil {
		// Aborting the handler closes the caller's connection without
		// completing the answer: the cut reaches the caller.
		panic(http.ErrAbortHandler)
	}
}

// trickleReader reads r one byte a second while on is set (and at full
// speed once it is not), until ctx ends: the body of a provider that sends
// one byte a second, as the caller sees it through the flushing writer.
type trickleReader struct {
	ctx context.Context
	r   io.Reader
	on  *atomic.Bool
}

func (t trickleReader) Read(b []byte) (int, error) {
	if !t.on.Load() || len(b) == 0 {
		return t.r.Read(b)
	}
	if !sleep(t.ctx, time.Second) {
		return 0, t.ctx.Err()
	}
	return t.r.Read(b[:1])
}

// flushWriter flushes after every write, so a partial body reaches the
// caller before the rest (or its absence) does.
type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(b []byte) (int, error) {
	n, err := f.w.Write(b)
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
	return n, err
}

// fakeAdmin talks to the fake upstream's /__fake/ endpoints.
type fakeAdmin struct {
	base   string
	client *http.Client
}

// configure posts a partial configuration; the fake answers 400 to a field
// it does not know.
func (f *fakeAdmin) configure(patch map[string]any) error {
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	resp, err := f.client.Post(f.base+"/__fake/config", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("fake upstream refused %s: %d %s", body, resp.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}

// total returns the fake's own count of provider calls.
func (f *fakeAdmin) total() (int64, error) {
	resp, err := f.client.Get(f.base + "/__fake/stats")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var stats struct {
		Total int64 `json:"total"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&stats); err != nil {
		return 0, err
	}
	return stats.Total, nil
}

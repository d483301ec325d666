// Package fakeupstream is an in-process stand-in for the four external
// providers buildrisk-radar calls (MOLIT apartment trades, DART corp codes
// and filings, KRX stock prices, CREDIT grades). Tests and `radar dev` point
// the upstream client at it, so that nothing ever reaches a real provider.
//
// A Server answers each provider endpoint on the real provider's path, in
// the real provider's format, including its way of refusing a missing key
// and its quirks (DART's " " stock code for unlisted companies, the
// corp-code archive's order changing between downloads, KRX's "items":""
// on holidays). All data derive from Config.Seed, so the same seed gives the
// same bodies in every process.
//
// Faults are injected per call: Config.ErrorRate and Config.Rate429 answer a
// fraction of calls with 500 and 429, Config.FailKeys answers chosen calls
// with 500 every time, Config.EmptyRate makes a fraction of credit
// lookups come back with an empty grade, and Config.ShortRate makes a
// fraction of apartment-trade and filing-list pages come back short of what
// their declared totals promise. Config.CutBodyRate, Config.HangBodyRate and
// Config.GarbageRate break the body of a 200 answer: cut short of its
// Content-Length with the connection closed, stalled after its first bytes
// until the caller gives up, or not in the provider's format at all.
// Config.QuoteKey refuses every call as an unregistered key, the refusal
// quoting the key the way a careless provider's does; Config.QuoteKeyForms
// quotes it in every form of QuotedKeyForms.
// Random choices hash the seed, the
// endpoint, the call key and how many times that key was called, so they do
// not depend on how concurrent calls interleave: the n-th call of a key
// always gets the same answer for the same seed.
//
// Every provider call is counted under its endpoint name and call key (the
// call's identifying query parameters joined with ":"). The admin endpoints
// below /__fake/ read the counts and change the configuration at run time:
//
//	GET  /__fake/stats   {"total":N,"calls":{"ENDPOINT":{"KEY":count}}}
//	GET  /__fake/config  the current configuration
//	POST /__fake/config  a partial configuration, for example
//	                     {"latency":"20ms","errorRate":0.05,"shortRate":0.1,"failKeys":{"aptTrade":["11110:202501"]}}
//	POST /__fake/reset   zero the counts
package fakeupstream

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Config.
const (
	// SeedDefault is the seed used when Config.Seed is 0.
	SeedDefault = 1

	// CompaniesDefault is the number of companies used when
	// Config.Companies is 0.
	CompaniesDefault = 3000

	// RetryAfterDefault is the Retry-After of the injected 429s when
	// Config.RetryAfter is 0.
	RetryAfterDefault = time.Second

	// CompaniesMax is the largest Config.Companies accepted; DART itself
	// lists about 100,000.
	CompaniesMax = 250_000
)

// Endpoint names, under which calls are counted and FailKeys are given.
const (
	EndpointAptTrade       = "aptTrade"
	EndpointCorpCode       = "corpCode"
	EndpointFilingList     = "filingList"
	EndpointStockPrice     = "stockPrice"
	EndpointCreditLookup   = "creditLookup"
	EndpointCreditFallback = "creditFallback"
)

// endpointNames lists the endpoint names in a stable order.
var endpointNames = []string{
	EndpointAptTrade, EndpointCorpCode, EndpointFilingList,
	EndpointStockPrice, EndpointCreditLookup, EndpointCreditFallback,
}

// Config tunes the fake's data and fault injection. The zero value serves
// the default universe without faults or latency.
type Config struct {
	// Latency is added to every provider call, to make concurrency and
	// timeouts observable.
	Latency time.Duration `json:"latency"`

	// ErrorRate is the fraction of provider calls answered with HTTP 500.
	ErrorRate float64 `json:"errorRate"`

	// Rate429 is the fraction of provider calls answered with HTTP 429 and
	// a Retry-After of RetryAfter.
	Rate429 float64 `json:"rate429"`

	// RetryAfter is the Retry-After of the injected 429s, sent in whole
	// seconds rounded up. 0 means RetryAfterDefault; a negative value sends
	// no Retry-After at all (the client then falls back on its backoff).
	RetryAfter time.Duration `json:"retryAfter"`

	// EmptyRate is the fraction of credit lookups answered with an empty
	// grade, which forces the job to call the fallback.
	EmptyRate float64 `json:"emptyRate"`

	// ShortRate is the fraction of aptTrade and filingList pages answered
	// short: the second half of the page's items (at least one) is left
	// out while totalCount / total_count still count them, the way a
	// provider under load truncates an answer.
	ShortRate float64 `json:"shortRate"`

	// CutBodyRate is the fraction of provider calls answered 200 with a
	// Content-Length larger than the body sent, the connection then closed:
	// the caller reads an unexpected EOF.
	CutBodyRate float64 `json:"cutBodyRate"`

	// HangBodyRate is the fraction of provider calls answered 200 whose
	// body stops after its first bytes and never ends: the caller's read
	// times out.
	HangBodyRate float64 `json:"hangBodyRate"`

	// GarbageRate is the fraction of provider calls answered 200 with a
	// body in no provider's format.
	GarbageRate float64 `json:"garbageRate"`

	// Seed determines all data and all random fault choices. 0 means
	// SeedDefault.
	Seed int64 `json:"seed"`

	// Companies is the number of companies in the DART corp-code archive.
	// 0 means CompaniesDefault.
	Companies int `json:"companies"`

	// FailKeys maps an endpoint name to call keys answered with HTTP 500
	// every time, for targeted fault injection.
	FailKeys map[string][]string `json:"failKeys"`

	// QuoteKey refuses every provider call as an unregistered key, in the
	// provider's format, with a message quoting the key as sent and the
	// request's path and query (the key URL-encoded there): "unregistered
	// key KEY (/api/list.json?...&crtfc_key=KEY)". Some providers' refusals
	// do; tests prove such a message never leaves the worker with the key.
	QuoteKey bool `json:"quoteKey"`

	// QuoteKeyForms refuses every provider call like QuoteKey, the
	// message quoting the key in every form of QuotedKeyForms instead.
	QuoteKeyForms bool `json:"quoteKeyForms"`

	// CorpNameQuotesKey makes the corp code archive start with an entry
	// whose corp_code is not 8 digits and whose corp_name is "Z" and the
	// key the download was made with: a parse error that quotes the name
	// shows the key.
	CorpNameQuotesKey bool `json:"corpNameQuotesKey"`
}

// configJSON is Config's JSON form: the latency is a Go duration string.
type configJSON struct {
	Latency    string              `json:"latency"`
	ErrorRate  float64             `json:"errorRate"`
	Rate429    float64             `json:"rate429"`
	RetryAfter string              `json:"retryAfter"`
	EmptyRate  float64             `json:"emptyRate"`
	ShortRate  float64             `json:"shortRate"`
	CutBody    float64             `json:"cutBodyRate"`
	HangBody   float64             `json:"hangBodyRate"`
	Garbage    float64             `json:"garbageRate"`
	Seed       int64               `json:"seed"`
	Companies  int                 `json:"companies"`
	FailKeys   map[string][]string `json:"failKeys"`
	QuoteKey   bool                `json:"quoteKey"`
	QuoteForms bool                `json:"quoteKeyForms"`
	CorpName   bool                `json:"corpNameQuotesKey"`
}

// MarshalJSON writes the configuration with the latency as a Go duration
// string, the form POST /__fake/config accepts.
func (c Config) MarshalJSON() ([]byte, error) {
	failKeys := c.FailKeys
	if failKeys == nil {
		failKeys = map[string][]string{}
	}
	return json.Marshal(configJSON{
		Latency:    c.Latency.String(),
		ErrorRate:  c.ErrorRate,
		Rate429:    c.Rate429,
		RetryAfter: c.RetryAfter.String(),
		EmptyRate:  c.EmptyRate,
		ShortRate:  c.ShortRate,
		CutBody:    c.CutBodyRate,
		HangBody:   c.HangBodyRate,
		Garbage:    c.GarbageRate,
		Seed:       c.Seed,
		Companies:  c.Companies,
		FailKeys:   failKeys,
		QuoteKey:   c.QuoteKey,
		QuoteForms: c.QuoteKeyForms,
		CorpName:   c.CorpNameQuotesKey,
	})
}

// UnmarshalJSON applies a partial configuration on top of c: only the fields
// present change, "failKeys" replaces every fail key (null clears them) and
// the latency is a Go duration string such as "20ms". Unknown fields are an
// error, so that a typo does not go unnoticed. It does not validate values;
// see Validate.
func (c *Config) UnmarshalJSON(b []byte) error {
	var patch struct {
		Latency    *string         `json:"latency"`
		ErrorRate  *float64        `json:"errorRate"`
		Rate429    *float64        `json:"rate429"`
		RetryAfter *string         `json:"retryAfter"`
		EmptyRate  *float64        `json:"emptyRate"`
		ShortRate  *float64        `json:"shortRate"`
		CutBody    *float64        `json:"cutBodyRate"`
		HangBody   *float64        `json:"hangBodyRate"`
		Garbage    *float64        `json:"garbageRate"`
		Seed       *int64          `json:"seed"`
		Companies  *int            `json:"companies"`
		FailKeys   json.RawMessage `json:"failKeys"`
		QuoteKey   *bool           `json:"quoteKey"`
		QuoteForms *bool           `json:"quoteKeyForms"`
		CorpName   *bool           `json:"corpNameQuotesKey"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&patch); err != nil {
		return fmt.Errorf("decode config: %w", err)
	}
	if dec.More() {
		return errors.New("decode config: trailing data after the object")
	}
	next := *c
	if patch.Latency != nil {
		d, err := time.ParseDuration(*patch.Latency)
		if err != nil {
			return fmt.Errorf("latency: %w", err)
		}
		next.Latency = d
	}
	if patch.ErrorRate != nil {
		next.ErrorRate = *patch.ErrorRate
	}
	if patch.Rate429 != nil {
		next.Rate429 = *patch.Rate429
	}
	if patch.RetryAfter != nil {
		d, err := time.ParseDuration(*patch.RetryAfter)
		if err != nil {
			return fmt.Errorf("retryAfter: %w", err)
		}
		next.RetryAfter = d
	}
	if patch.EmptyRate != nil {
		next.EmptyRate = *patch.EmptyRate
	}
	if patch.ShortRate != nil {
		next.ShortRate = *patch.ShortRate
	}
	if patch.CutBody != nil {
		next.CutBodyRate = *patch.CutBody
	}
	if patch.HangBody != nil {
		next.HangBodyRate = *patch.HangBody
	}
	if patch.Garbage != nil {
		next.GarbageRate = *patch.Garbage
	}
	if patch.Seed != nil {
		next.Seed = *patch.Seed
	}
	if patch.Companies != nil {
		next.Companies = *patch.Companies
	}
	if len(patch.FailKeys) > 0 {
		var failKeys map[string][]string
		if err := json.Unmarshal(patch.FailKeys, &failKeys); err != nil {
			return fmt.Errorf("failKeys: %w", err)
		}
		next.FailKeys = failKeys
	}
	if patch.QuoteKey != nil {
		next.QuoteKey = *patch.QuoteKey
	}
	if patch.QuoteForms != nil {
		next.QuoteKeyForms = *patch.QuoteForms
	}
	if patch.CorpName != nil {
		next.CorpNameQuotesKey = *patch.CorpName
	}
	*c = next
	return nil
}

// Validate reports the first value out of range: a negative latency, a rate
// outside [0, 1], ErrorRate plus Rate429 above 1, a company count outside
// [0, CompaniesMax] or a fail key for an unknown endpoint.
func (c Config) Validate() error {
	if c.Latency < 0 {
		return fmt.Errorf("latency %s is negative", c.Latency)
	}
	for _, r := range []struct {
		name string
		val  float64
	}{{"errorRate", c.ErrorRate}, {"rate429", c.Rate429}, {"emptyRate", c.EmptyRate}, {"shortRate", c.ShortRate},
		{"cutBodyRate", c.CutBodyRate}, {"hangBodyRate", c.HangBodyRate}, {"garbageRate", c.GarbageRate}} {
		if !(r.val >= 0 && r.val <= 1) {
			return fmt.Errorf("%s %v is outside [0, 1]", r.name, r.val)
		}
	}
	if c.ErrorRate+c.Rate429 > 1 {
		return fmt.Errorf("errorRate %v plus rate429 %v exceeds 1", c.ErrorRate, c.Rate429)
	}
	if body := c.CutBodyRate + c.HangBodyRate + c.GarbageRate; body > 1 {
		return fmt.Errorf("cutBodyRate %v plus hangBodyRate %v plus garbageRate %v exceeds 1", c.CutBodyRate, c.HangBodyRate, c.GarbageRate)
	}
	if c.Companies < 0 || c.Companies > CompaniesMax {
		return fmt.Errorf("companies %d is outside [0, %d]", c.Companies, CompaniesMax)
	}
	for ep := range c.FailKeys {
		if !slices.Contains(endpointNames, ep) {
			return fmt.Errorf("failKeys: unknown endpoint %q (known: %s)", ep, strings.Join(endpointNames, ", "))
		}
	}
	return nil
}

// normalized returns c with defaults filled in, values clamped into range
// and FailKeys copied, so that the caller's map can change afterwards.
func (c Config) normalized() Config {
	if c.Seed == 0 {
		c.Seed = SeedDefault
	}
	if c.Companies <= 0 {
		c.Companies = CompaniesDefault
	}
	c.Companies = min(c.Companies, CompaniesMax)
	c.Latency = max(c.Latency, 0)
	c.RetryAfter = cmp.Or(c.RetryAfter, RetryAfterDefault)
	clamp := func(f float64) float64 {
		if !(f > 0) { // also NaN
			return 0
		}
		return min(f, 1)
	}
	c.ErrorRate = clamp(c.ErrorRate)
	c.Rate429 = min(clamp(c.Rate429), 1-c.ErrorRate)
	c.EmptyRate = clamp(c.EmptyRate)
	c.ShortRate = clamp(c.ShortRate)
	c.CutBodyRate = clamp(c.CutBodyRate)
	c.HangBodyRate = min(clamp(c.HangBodyRate), 1-c.CutBodyRate)
	c.GarbageRate = min(clamp(c.GarbageRate), 1-c.CutBodyRate-c.HangBodyRate)
	if c.FailKeys != nil {
		failKeys := make(map[string][]string, len(c.FailKeys))
		for ep, keys := range c.FailKeys {
			failKeys[ep] = slices.Clone(keys)
		}
		c.FailKeys = failKeys
	}
	return c
}

// Stats are the provider calls counted since the server started or was last
// reset.
type Stats struct {
	// Total is the number of provider calls.
	Total int64 `json:"total"`

	// Calls counts the calls by endpoint name, then by call key.
	Calls map[string]map[string]int64 `json:"calls"`
}

// state is an immutable snapshot of the configuration and what derives from
// it; calls load it once and use it throughout.
type state struct {
	cfg      Config
	u        *universe
	failKeys map[string]map[string]bool
}

// Server is the fake upstream. It implements http.Handler and is safe for
// concurrent use.
type Server struct {
	mux *http.ServeMux

	// cur is the current state; calls read it without locking.
	cur atomic.Pointer[state]

	// cfgMu serialises configuration changes.
	cfgMu sync.Mutex

	// mu guards the counts below; it is held only to update or copy them.
	mu    sync.Mutex
	total int64
	calls map[string]map[string]int64
}

// New returns a server configured with cfg. Zero Seed and Companies take
// their defaults; values out of range (see Config.Validate) are clamped.
func New(cfg Config) *Server {
	s := &Server{mux: http.NewServeMux(), calls: map[string]map[string]int64{}}
	s.cur.Store(newState(cfg.normalized(), nil))

	s.mux.HandleFunc("GET /__fake/stats", s.handleStats)
	s.mux.HandleFunc("GET /__fake/config", s.handleGetConfig)
	s.mux.HandleFunc("POST /__fake/config", s.handlePostConfig)
	s.mux.HandleFunc("POST /__fake/reset", s.handleReset)

	s.mux.Handle("GET "+pathAptTrade, s.provider(EndpointAptTrade, []string{"LAWD_CD", "DEAL_YMD"}, "serviceKey", writeDataGoKrKeyError, s.serveAptTrade))
	s.mux.Handle("GET "+pathCorpCode, s.provider(EndpointCorpCode, nil, "crtfc_key", writeDARTXMLKeyError, s.serveCorpCode))
	s.mux.Handle("GET "+pathFilingList, s.provider(EndpointFilingList, []string{"corp_code", "bgn_de", "end_de", "page_no"}, "crtfc_key", writeDARTJSONKeyError, s.serveFilingList))
	s.mux.Handle("GET "+pathStockPrice, s.provider(EndpointStockPrice, []string{"likeSrtnCd", "basDt"}, "serviceKey", writeDataGoKrKeyError, s.serveStockPrice))
	s.mux.Handle("GET "+pathCreditLookup, s.provider(EndpointCreditLookup, []string{"corpCode"}, "apiKey", writeCreditKeyError, s.serveCreditLookup))
	s.mux.Handle("GET "+pathCreditFallback, s.provider(EndpointCreditFallback, []string{"corpCode"}, "apiKey", writeCreditKeyError, s.serveCreditFallback))
	return s
}

// newState derives the state for cfg (already normalized), reusing the
// universe of prev when the seed and company count are unchanged.
func newState(cfg Config, prev *state) *state {
	st := &state{cfg: cfg, failKeys: map[string]map[string]bool{}}
	if prev != nil && prev.cfg.Seed == cfg.Seed && prev.cfg.Companies == cfg.Companies {
		st.u = prev.u
	} else {
		st.u = newUniverse(cfg.Seed, cfg.Companies)
	}
	for ep, keys := range cfg.FailKeys {
		set := make(map[string]bool, len(keys))
		for _, k := range keys {
			set[k] = true
		}
		st.failKeys[ep] = set
	}
	return st
}

// ServeHTTP answers provider and admin requests.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Config returns the current configuration, defaults filled in.
func (s *Server) Config() Config { return s.cur.Load().cfg.normalized() }

// SetConfig replaces the configuration at run time, as POST /__fake/config
// does, and keeps the counts. Zero Seed and Companies take their defaults;
// values out of range are clamped. Changing Seed or Companies rebuilds the
// company universe.
func (s *Server) SetConfig(cfg Config) {
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	s.setConfigLocked(cfg)
}

// setConfigLocked installs cfg; the caller holds cfgMu.
func (s *Server) setConfigLocked(cfg Config) {
	s.cur.Store(newState(cfg.normalized(), s.cur.Load()))
}

// Stats returns a copy of the counts.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Total: s.total, Calls: make(map[string]map[string]int64, len(s.calls))}
	for ep, keys := range s.calls {
		st.Calls[ep] = maps.Clone(keys)
	}
	return st
}

// Reset zeroes the counts. Because random fault choices depend on how often
// a key was called, the calls after a reset get the same answers as the
// calls after the start.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total = 0
	s.calls = map[string]map[string]int64{}
}

// Companies returns the company universe, sorted by corp code, for tests and
// seeding. The slice is a copy.
func (s *Server) Companies() []Company {
	u := s.cur.Load().u
	out := make([]Company, len(u.companies))
	for i, c := range u.companies {
		c.MainRegions = slices.Clone(c.MainRegions)
		out[i] = c
	}
	return out
}

// count records one call of endpoint with key and returns how many times the
// key has been called, this call included.
func (s *Server) count(endpoint, key string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total++
	keys := s.calls[endpoint]
	if keys == nil {
		keys = map[string]int64{}
		s.calls[endpoint] = keys
	}
	keys[key]++
	return keys[key]
}

// call is one provider call being answered.
type call struct {
	// st is the state the call runs under.
	st *state

	// endpoint and key identify the call; n is the how-many-th call of the
	// key it is.
	endpoint, key string
	n             int64

	// q is the request's query.
	q url.Values
}

// draw returns a number in [0, 1) fixed by the seed, the call and purpose.
func (c *call) draw(purpose string) float64 {
	return newHasher(c.st.cfg.Seed).str(purpose).str(c.endpoint).str(c.key).num(c.n).unit()
}

// provider wraps the handler of one provider endpoint with what every call
// goes through: counting, latency, injected faults and the key check
// (writeKeyError answers a missing key the way the provider does, with
// its own message when given "").
func (s *Server) provider(endpoint string, keyParams []string, keyParam string, writeKeyError func(w http.ResponseWriter, msg string), serve func(http.ResponseWriter, *call)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		key := "all"
		if len(keyParams) > 0 {
			vals := make([]string, len(keyParams))
			for i, p := range keyParams {
				vals[i] = q.Get(p)
			}
			key = strings.Join(vals, ":")
		}
		c := &call{st: s.cur.Load(), endpoint: endpoint, key: key, q: q}
		c.n = s.count(endpoint, key)

		if !sleep(r.Context(), c.st.cfg.Latency) {
			return // the caller gave up; nobody reads an answer
		}
		if c.st.failKeys[endpoint][key] {
			http.Error(w, fmt.Sprintf("injected failure for %s %s", endpoint, key), http.StatusInternalServerError)
			return
		}
		if cfg := c.st.cfg; cfg.ErrorRate > 0 || cfg.Rate429 > 0 {
			switch f := c.draw("fault"); {
			case f < cfg.ErrorRate:
				http.Error(w, "injected internal server error", http.StatusInternalServerError)
				return
			case f < cfg.ErrorRate+cfg.Rate429:
				if ra := cfg.RetryAfter; ra > 0 {
					w.Header().Set("Retry-After", strconv.FormatInt(int64((ra+time.Second-1)/time.Second), 10))
				}
				http.Error(w, "injected rate limit: too many requests", http.StatusTooManyRequests)
				return
			}
		}
		if cfg := c.st.cfg; cfg.CutBodyRate > 0 || cfg.HangBodyRate > 0 || cfg.GarbageRate > 0 {
			switch f := c.draw("body"); {
			case f < cfg.CutBodyRate:
				writeCutBody(w)
				return
			case f < cfg.CutBodyRate+cfg.HangBodyRate:
				writeHangingBody(w, r)
				return
			case f < cfg.CutBodyRate+cfg.HangBodyRate+cfg.GarbageRate:
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, "\x00\x7f<<injected garbage, in no provider's format>>{")
				return
			}
		}
		if c.st.cfg.QuoteKeyForms {
			writeKeyError(w, quotedKeyFormsMessage(q.Get(keyParam), r.URL.RequestURI()))
			return
		}
		if c.st.cfg.QuoteKey {
			writeKeyError(w, fmt.Sprintf("unregistered key %s (%s)", q.Get(keyParam), r.URL.RequestURI()))
			return
		}
		if strings.TrimSpace(q.Get(keyParam)) == "" {
			writeKeyError(w, "")
			return
		}
		serve(w, c)
	})
}

// bodyPrefix is the start of a broken body: enough to look like an answer.
const bodyPrefix = `{"response":{"header":{"resultCode":"00"},"body":{"items":[`

// writeCutBody answers 200 promising more bytes than it sends, then closes
// the connection (net/http does not reuse a connection whose answer is
// short of its Content-Length; hijacking makes the close explicit).
func writeCutBody(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(bodyPrefix)+4096))
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, bodyPrefix)
	if hj, ok := w.(http.Hijacker); ok {
		if conn, buf, err := hj.Hijack(); err == nil {
			_ = buf.Flush()
			_ = conn.Close()
		}
	}
}

// writeHangingBody answers 200 with the first bytes of a body and then
// sends nothing more until the caller gives up.
func writeHangingBody(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(bodyPrefix)+4096))
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, bodyPrefix)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	<-r.Context().Done()
}

// sleep waits for d or until ctx is done, and reports whether it waited the
// whole time.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// handleStats answers GET /__fake/stats.
func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}

// handleGetConfig answers GET /__fake/config.
func (s *Server) handleGetConfig(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Config())
}

// maxConfigBody bounds the body of POST /__fake/config.
const maxConfigBody = 1 << 20

// handlePostConfig answers POST /__fake/config: it applies the partial
// configuration in the body and answers with the resulting configuration, or
// 400 and the reason.
func (s *Server) handlePostConfig(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxConfigBody+1))
	if err != nil {
		writeAdminError(w, http.StatusBadRequest, fmt.Errorf("read body: %w", err))
		return
	}
	if len(body) > maxConfigBody {
		writeAdminError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("config body exceeds %d bytes", maxConfigBody))
		return
	}
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	cfg := s.cur.Load().cfg
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &cfg); err != nil {
			writeAdminError(w, http.StatusBadRequest, fmt.Errorf("bad config: %w", err))
			return
		}
	}
	if err := cfg.Validate(); err != nil {
		writeAdminError(w, http.StatusBadRequest, fmt.Errorf("bad config: %w", err))
		return
	}
	s.setConfigLocked(cfg)
	writeJSON(w, http.StatusOK, s.cur.Load().cfg)
}

// handleReset answers POST /__fake/reset.
func (s *Server) handleReset(w http.ResponseWriter, _ *http.Request) {
	s.Reset()
	w.WriteHeader(http.StatusNoContent)
}

// writeAdminError answers an admin request with status and {"error": err}.
func writeAdminError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, map[string]string{"error": err.Error()})
}

// writeJSON answers with status and v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeBody answers with status, contentType and body.
func writeBody(w http.ResponseWriter, status int, contentType string, body []byte) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

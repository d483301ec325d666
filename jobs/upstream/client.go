package upstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
)

// Defaults of ClientConfig.
const (
	AttemptsDefault       = 3
	BackoffDefault        = 200 * time.Millisecond
	MaxBackoffDefault     = 5 * time.Second
	RequestTimeoutDefault = 30 * time.Second
)

// DailyCapDefaults are the contract's daily call caps per provider.
var DailyCapDefaults = map[Provider]int{
	ProviderDART:   20000,
	ProviderMOLIT:  10000,
	ProviderKRX:    10000,
	ProviderCREDIT: 50000,
}

// ErrCapped is returned when a provider's daily cap is reached: the job
// stops at the chunk boundary and resumes on another day.
var ErrCapped = errors.New("daily cap reached")

// ErrMaxCalls is returned when an execution has made the maxCalls the user
// gave for it.
var ErrMaxCalls = errors.New("maxCalls reached")

// ErrNoKey is returned when the worker has no key for the provider.
var ErrNoKey = errors.New("no API key configured")

// CapError names the provider whose daily cap was reached.
type CapError struct {
	Provider Provider
	Cap      int
}

// Error implements error.
func (e *CapError) Error() string {
	return fmt.Sprintf("daily cap of %s reached (%d calls)", e.Provider, e.Cap)
}

// Is makes errors.Is(err, ErrCapped) true.
func (e *CapError) Is(target error) bool { return target == ErrCapped }

// CallError is a provider call that still failed after its retries.
type CallError struct {
	Provider Provider
	Endpoint string
	Key      string
	Status   int
	Attempts int
	Err      error
}

// Error implements error.
func (e *CallError) Error() string {
	what := fmt.Sprintf("%s %s", e.Provider, e.Endpoint)
	if e.Key != "" {
		what += " " + e.Key
	}
	if e.Status != 0 {
		return fmt.Sprintf("%s: HTTP %d after %d attempts", what, e.Status, e.Attempts)
	}
	return fmt.Sprintf("%s: %v after %d attempts", what, e.Err, e.Attempts)
}

// Unwrap returns the transport error, if any.
func (e *CallError) Unwrap() error { return e.Err }

// ClientConfig configures a Client. Only cmd/radar reads the environment.
type ClientConfig struct {
	// BaseURLs is each provider's base URL (BUILDRISK_UPSTREAM_URL or
	// BUILDRISK_<P>_URL).
	BaseURLs map[Provider]string
	// Keys is each provider's API key. Values never leave this struct.
	Keys map[Provider]string
	// DailyCaps overrides DailyCapDefaults.
	DailyCaps map[Provider]int
	// Location is the day boundary of the caps (BUILDRISK_TIMEZONE).
	Location *time.Location
	// Now is the clock; tests inject one to cross a day.
	Now func() time.Time
	// Attempts per call (first try included); default 3.
	Attempts int
	// Backoff is the first retry delay, doubled per retry; Retry-After wins.
	Backoff time.Duration
	// MaxBackoff bounds any single wait, Retry-After included.
	MaxBackoff time.Duration
	// HTTPClient defaults to a client with RequestTimeoutDefault.
	HTTPClient *http.Client
	// Instruments counts calls. Required.
	Instruments *observability.Instruments
	// FanOut is how many calls one execution makes at once
	// (BUILDRISK_FANOUT): a lease is never smaller, so a full pool of slots
	// passes on one lease. Default 1.
	FanOut int
	// Holder names the process in the leases it takes (the worker id).
	Holder string
	// LeaseSpan is how many seconds of calls a lease of the daily cap
	// covers; default LeaseSpanDefault.
	LeaseSpan time.Duration
	// LeaseTTL is how long a lease lives without a claim; default
	// LeaseTTLDefault.
	LeaseTTL time.Duration
	// CapWait is how often a Caller looks again when the day's cap is
	// taken but other leases are open; default CapWaitDefault.
	CapWait time.Duration
}

func (c ClientConfig) withDefaults() ClientConfig {
	c.Attempts = cmp.Or(c.Attempts, AttemptsDefault)
	c.Backoff = cmp.Or(c.Backoff, BackoffDefault)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, MaxBackoffDefault)
	c.FanOut = max(c.FanOut, 1)
	c.Holder = cmp.Or(c.Holder, "unnamed")
	c.LeaseSpan = cmp.Or(c.LeaseSpan, LeaseSpanDefault)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, LeaseTTLDefault)
	c.CapWait = cmp.Or(c.CapWait, CapWaitDefault)
	if c.Location == nil {
		c.Location = time.UTC
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: RequestTimeoutDefault}
	}
	caps := make(map[Provider]int, len(DailyCapDefaults))
	for p, v := range DailyCapDefaults {
		caps[p] = v
	}
	for p, v := range c.DailyCaps {
		caps[p] = v
	}
	c.DailyCaps = caps
	return c
}

// Client calls providers for every job of a process: it adds the key,
// takes each attempt from the shared daily budget (in leases, see lease.go)
// before making it, retries with backoff honouring Retry-After, and counts
// every call.
type Client struct {
	cfg     ClientConfig
	pool    *pgxpool.Pool
	queries *queries.Queries
}

// NewClient returns a Client.
func NewClient(pool *pgxpool.Pool, cfg ClientConfig) (*Client, error) {
	if cfg.Instruments == nil {
		return nil, errors.New("upstream: Instruments is required")
	}
	return &Client{cfg: cfg.withDefaults(), pool: pool, queries: queries.New()}, nil
}

// DailyCap returns the provider's daily cap.
func (c *Client) DailyCap(p Provider) int { return c.cfg.DailyCaps[p] }

// Day returns the calendar date of t in loc as midnight UTC (how a date
// column reads back): the day of call budgets and of a job's results.
func Day(t time.Time, loc *time.Location) time.Time {
	local := t.In(loc)
	return time.Date(local.Year(), local.Month(), local.Day(), 0, 0, 0, 0, time.UTC)
}

// Day returns the budget day of t in the configured time zone.
func (c *Client) Day(t time.Time) time.Time { return Day(t, c.cfg.Location) }

// Today returns the budget day of the client's clock (ClientConfig.Now)
// in the configured time zone: the day a job stamps its results with, so
// that tests crossing a day boundary move it too.
func (c *Client) Today() time.Time { return c.Day(c.cfg.Now()) }

// Remaining returns how many calls of the provider's cap are left today.
func (c *Client) Remaining(ctx context.Context, p Provider) (int, error) {
	used, err := c.queries.ProviderCallBudgetGet(ctx, c.pool, &queries.ProviderCallBudgetGetParams{Provider: string(p), Day: c.Today()})
	if err := queries.Interpret(err); err != nil && !errors.Is(err, queries.ErrNotFound) {
		return 0, fmt.Errorf("error reading call budget: %w", err)
	}
	return max(c.cfg.DailyCaps[p]-int(used), 0), nil
}

// Caller makes one execution's calls: it counts them, enforces the
// execution's maxCalls, if the user gave one, and holds the execution's
// leases of the daily caps. Both limits are reserved before a call is made,
// never checked and then spent, so neither is exceeded at any fan-out.
// Release it when the execution ends.
type Caller struct {
	client   *Client
	job      string
	maxCalls int
	calls    atomic.Int64

	mu       sync.Mutex // guards the leases; held while one is taken
	claimed  *sync.Cond // on mu: a claim ahead ended
	ahead    sync.WaitGroup
	leases   map[Provider]*lease
	rate     map[Provider]float64   // calls per second of the last spent lease
	cappedOn map[Provider]time.Time // the day a provider's cap was found spent
}

// NewCaller returns a Caller for one execution of job; maxCalls 0 means no
// per-execution limit.
func (c *Client) NewCaller(job string, maxCalls int) *Caller {
	cl := &Caller{
		client: c, job: job, maxCalls: maxCalls,
		leases: map[Provider]*lease{}, rate: map[Provider]float64{}, cappedOn: map[Provider]time.Time{},
	}
	cl.claimed = sync.NewCond(&cl.mu)
	return cl
}

// Today returns the client's Today: the execution's day in
// BUILDRISK_TIMEZONE from the injected clock.
func (cl *Caller) Today() time.Time { return cl.client.Today() }

// Calls returns the HTTP calls made so far (retries included).
func (cl *Caller) Calls() int64 { return cl.calls.Load() }

// Get calls endpoint with query (the key is added here) and returns the
// body of a 2xx answer.
func (cl *Caller) Get(ctx context.Context, endpoint Endpoint, query url.Values) ([]byte, error) {
	c := cl.client
	key := endpoint.CallKey(query)
	provider := endpoint.Provider
	base, ok := c.cfg.BaseURLs[provider]
	if !ok || base == "" {
		return nil, fmt.Errorf("%s %s: no base URL configured (set BUILDRISK_UPSTREAM_URL or BUILDRISK_%s_URL)", provider, endpoint.Name, provider)
	}
	apiKey := c.cfg.Keys[provider]
	if apiKey == "" {
		return nil, fmt.Errorf("%s %s: %w (set %s)", provider, endpoint.Name, ErrNoKey, provider.KeyEnv())
	}
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	q.Set(provider.KeyParam(), apiKey)
	target := strings.TrimRight(base, "/") + endpoint.Path + "?" + q.Encode()

	var lastStatus, attempts int
	var lastErr error
	for attempt := 1; attempt <= c.cfg.Attempts; attempt++ {
		attempts = attempt
		// Reserve the call under maxCalls, then under the daily cap.
		if n := cl.calls.Add(1); cl.maxCalls > 0 && n > int64(cl.maxCalls) {
			cl.calls.Add(-1)
			return nil, fmt.Errorf("%w (%d)", ErrMaxCalls, cl.maxCalls)
		}
		if err := cl.take(ctx, provider); err != nil {
			cl.calls.Add(-1)
			if errors.Is(err, ErrCapped) {
				c.cfg.Instruments.FanoutRejected(ctx, cl.job, observability.ReasonCap)
			}
			return nil, err
		}
		body, status, retryAfter, err := c.do(ctx, target)
		if err == nil && status >= 200 && status < 300 {
			c.cfg.Instruments.ExternalCall(ctx, string(provider), observability.CallOK)
			return body, nil
		}
		c.cfg.Instruments.ExternalCall(ctx, string(provider), observability.CallError)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		lastStatus, lastErr = status, err
		if status == http.StatusTooManyRequests {
			c.cfg.Instruments.FanoutRejected(ctx, cl.job, observability.ReasonProvider429)
		}
		if err == nil && status != http.StatusTooManyRequests && status < 500 {
			break // a 4xx other than 429 will not get better
		}
		if attempt == c.cfg.Attempts {
			break
		}
		wait := c.cfg.Backoff << (attempt - 1)
		if retryAfter > 0 {
			wait = retryAfter
		}
		wait = min(wait, c.cfg.MaxBackoff)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
	return nil, &CallError{Provider: provider, Endpoint: endpoint.Name, Key: key, Status: lastStatus, Attempts: attempts, Err: lastErr}
}

func (c *Client) do(ctx context.Context, target string) ([]byte, int, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("error building request: %w", err)
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, 0, 0, errors.New(redactKey(err.Error()))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, resp.StatusCode, 0, fmt.Errorf("error reading body: %w", err)
	}
	var retryAfter time.Duration
	if s := resp.Header.Get("Retry-After"); s != "" {
		if secs, err := strconv.Atoi(s); err == nil {
			retryAfter = time.Duration(secs) * time.Second
		}
	}
	return body, resp.StatusCode, retryAfter, nil
}

// redactKey removes query strings (which carry the key) from transport
// errors so a key never reaches a log or a request message.
func redactKey(s string) string {
	if i := strings.Index(s, "?"); i >= 0 {
		end := strings.IndexAny(s[i:], "\" ")
		if end < 0 {
			return s[:i]
		}
		return s[:i] + s[i+end:]
	}
	return s
}

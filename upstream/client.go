package upstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
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
	"github.com/buildrisk/radar/sql/pgtx"
)

// Defaults of ClientConfig.
const (
	AttemptsDefault       = 3
	BackoffDefault        = 200 * time.Millisecond
	MaxBackoffDefault     = 5 * time.Second
	RequestTimeoutDefault = 30 * time.Second
	// RetryAfterMaxDefault bounds how long a provider's Retry-After past
	// MaxBackoff stops a run (RateLimitedError.Until): a provider asking for
	// a day is called again after six hours, and refuses again if it meant
	// it, which costs one call.
	RetryAfterMaxDefault = 6 * time.Hour
	// MaxResponseBytesDefault bounds a provider's answer: the largest real
	// one, DART's corp-code archive, is a few MB.
	MaxResponseBytesDefault = 64 << 20
)

// ErrResponseTooLarge is a provider answer over ClientConfig.MaxResponseBytes;
// it is not retried.
var ErrResponseTooLarge = errors.New("provider response too large")

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

// RetryAfterLimit is the longest Retry-After the client reads; a longer one
// (a typo of the provider's, a number past time.Duration) is read as this,
// which is past RetryAfterMax anyway.
const RetryAfterLimit = 365 * 24 * time.Hour

// RateLimitedError is a provider's 429 whose Retry-After asks for a longer
// wait than the client waits within a call (ClientConfig.MaxBackoff). It is
// an instruction, not a transient refusal: the call is not retried, since
// every attempt is paid for and would only be refused again, and the
// execution's further calls to the provider are not made before Until
// (Caller.Get returns this error for them). The runner stops the run with
// stop cause provider-rate, and its automatic resume is due at Until.
type RateLimitedError struct {
	Provider Provider
	Endpoint string
	// RetryAfter is the wait the provider asked for, from its answer.
	RetryAfter time.Duration
	// Wait is the wait honoured: RetryAfter, at most
	// ClientConfig.RetryAfterMax.
	Wait time.Duration
	// Until is when the provider may be called again, by this process's
	// clock: the answer's arrival plus Wait.
	Until time.Time
}

// Error implements error.
func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("%s %s: HTTP 429 asking to wait %s (Retry-After), longer than the client waits within a call",
		e.Provider, e.Endpoint, e.RetryAfter)
}

// ProviderName implements pgtx.ProviderError: the provider's answer, never
// a database error.
func (e *RateLimitedError) ProviderName() string { return string(e.Provider) }

var _ pgtx.ProviderError = (*RateLimitedError)(nil)

// CallError is a provider call that still failed after its retries. The
// Client that returns one has passed Err through its key values' redaction
// (Client.RedactError).
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
	if e.Err == nil {
		return fmt.Sprintf("%s: HTTP %d after %d attempts", what, e.Status, e.Attempts)
	}
	return observability.Redact(fmt.Sprintf("%s: %v after %d attempts", what, e.Err, e.Attempts))
}

// Unwrap returns the transport error, if any.
func (e *CallError) Unwrap() error { return e.Err }

// ProviderName implements pgtx.ProviderError: a call error is the
// provider's, whatever transport error it wraps.
func (e *CallError) ProviderName() string { return string(e.Provider) }

var _ pgtx.ProviderError = (*CallError)(nil)

// ClientConfig configures a Client. Only cmd/radar reads the environment.
type ClientConfig struct {
	// BaseURLs is each provider's base URL (BUILDRISK_UPSTREAM_URL or
	// BUILDRISK_<P>_URL).
	BaseURLs map[Provider]string
	// Keys is each provider's API key. Values never leave this struct: every
	// error the Client returns, and every error a job's parsing of an answer
	// makes (Client.RedactError), has them scrubbed in every form.
	Keys map[Provider]string
	// DailyCaps overrides DailyCapDefaults.
	DailyCaps map[Provider]int
	// Location is the day boundary of the caps (BUILDRISK_TIMEZONE).
	Location *time.Location
	// Now, when set, replaces the database's clock as the clock of the
	// budget day; tests inject one to cross a day.
	Now func() time.Time
	// ProcessClock is this process's clock (default time.Now). Without Now,
	// the budget day is the database's: its clock is read as an offset from
	// this one at every lease taken (and before the first), so a process
	// whose clock is off charges the same day as every other process.
	// Tests skew it.
	ProcessClock func() time.Time
	// Attempts per call (first try included); default 3.
	Attempts int
	// Backoff is the first retry delay, doubled per retry; Retry-After wins.
	Backoff time.Duration
	// MaxBackoff bounds any single wait within a call. A 429 whose
	// Retry-After asks for longer is not retried: the call returns a
	// *RateLimitedError and the run stops until then.
	MaxBackoff time.Duration
	// RetryAfterMax bounds the wait of a *RateLimitedError (its Until);
	// default RetryAfterMaxDefault.
	RetryAfterMax time.Duration
	// MaxResponseBytes bounds the body of one provider answer; default
	// MaxResponseBytesDefault. A larger answer fails with ErrResponseTooLarge
	// after reading at most this much.
	MaxResponseBytes int64
	// RequestTimeout bounds one HTTP attempt; default RequestTimeoutDefault.
	RequestTimeout time.Duration
	// AllowHTTP accepts plain http:// base URLs: the fake upstream of
	// `radar dev` and the tests (BUILDRISK_INSECURE_HTTP_UPSTREAM=1). Without
	// it every base URL must be https, so a key never travels in clear.
	AllowHTTP bool
	// Transport sends the requests; default http.DefaultTransport.
	Transport http.RoundTripper
	// WrapTransport, when set, wraps the transport for instrumentation
	// (otelhttp's client spans). The provider key is added below the wrapper,
	// so nothing the wrapper records ever holds it.
	WrapTransport func(http.RoundTripper) http.RoundTripper
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
	// Rates is each provider's rate limit in calls per second, shared by
	// every worker of the fleet (BUILDRISK_RATE_<P>, see rate.go). A
	// provider absent from the map has none: its calls cost nothing more.
	Rates map[Provider]float64
	// RateBlockSpan is the longest stretch of a provider's shared schedule
	// one block of slots reserves; default RateBlockSpanDefault.
	RateBlockSpan time.Duration
	// Logger receives the summary line of 429s under a rate limit; default
	// slog.Default().
	Logger *slog.Logger
	// SummaryInterval is the least time between two such lines; default
	// observability.SummaryIntervalDefault.
	SummaryInterval time.Duration
}

func (c ClientConfig) withDefaults() ClientConfig {
	c.Attempts = cmp.Or(c.Attempts, AttemptsDefault)
	c.Backoff = cmp.Or(c.Backoff, BackoffDefault)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, MaxBackoffDefault)
	c.RetryAfterMax = cmp.Or(c.RetryAfterMax, RetryAfterMaxDefault)
	c.FanOut = max(c.FanOut, 1)
	c.Holder = cmp.Or(c.Holder, "unnamed")
	c.LeaseSpan = cmp.Or(c.LeaseSpan, LeaseSpanDefault)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, LeaseTTLDefault)
	c.CapWait = cmp.Or(c.CapWait, CapWaitDefault)
	c.RateBlockSpan = cmp.Or(c.RateBlockSpan, RateBlockSpanDefault)
	c.SummaryInterval = cmp.Or(c.SummaryInterval, observability.SummaryIntervalDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Location == nil {
		c.Location = time.UTC
	}
	if c.ProcessClock == nil {
		c.ProcessClock = time.Now
	}
	c.RequestTimeout = cmp.Or(c.RequestTimeout, RequestTimeoutDefault)
	c.MaxResponseBytes = cmp.Or(c.MaxResponseBytes, MaxResponseBytesDefault)
	if c.Transport == nil {
		c.Transport = http.DefaultTransport
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

// validate returns an error for a value out of range.
func (c ClientConfig) validate() error {
	for p, base := range c.BaseURLs {
		if base == "" {
			continue
		}
		if _, err := providerOrigin(base, c.AllowHTTP); err != nil {
			return fmt.Errorf("upstream: base URL of %s: %w", p, err)
		}
	}
	if c.RetryAfterMax < c.MaxBackoff {
		return fmt.Errorf("upstream: RetryAfterMax (%s) must be at least MaxBackoff (%s)", c.RetryAfterMax, c.MaxBackoff)
	}
	for p, rate := range c.Rates {
		if !(rate > 0) || math.IsInf(rate, 1) {
			return fmt.Errorf("upstream: rate of %s must be a positive number of calls per second, got %v", p, rate)
		}
	}
	return nil
}

// Client calls providers for every job of a process: it adds the key,
// takes each attempt from the shared daily budget (in leases, see lease.go)
// before making it, retries with backoff honouring Retry-After, and counts
// every call.
type Client struct {
	cfg     ClientConfig
	pool    *pgxpool.Pool
	queries *queries.Queries
	http    *http.Client
	// rates holds a dispenser per provider with a rate limit; nil for the
	// others, which then cost nothing more per call.
	rates map[Provider]*rateLimiter
	// origins holds each configured provider's origin, or why its base URL
	// cannot take its key, parsed once instead of at every call.
	origins map[Provider]originOf
	// limitLowered counts the 429s answered under a rate limit, logged as
	// one summary line at most every SummaryInterval.
	limitLowered  *observability.Summary
	lastLimitLine atomic.Int64 // unix nanoseconds of the last such line
	// secrets are the configured keys: every error text the client makes
	// goes through their redaction.
	secrets *observability.Secrets
	// dbOffset is the database's clock minus ProcessClock, in nanoseconds,
	// as last read (dbClockRead once it was read at least once).
	dbOffset    atomic.Int64
	dbClockRead atomic.Bool
	// ledger remembers the leases taken, to re-assert them after a
	// failover (ledger.go).
	ledger ledger
}

// NewClient returns a Client.
func NewClient(pool *pgxpool.Pool, cfg ClientConfig) (*Client, error) {
	if cfg.Instruments == nil {
		return nil, errors.New("upstream: Instruments is required")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(cfg.Keys))
	for _, key := range cfg.Keys {
		keys = append(keys, key)
	}
	secrets := observability.NewSecrets(keys...)
	var transport http.RoundTripper = &keyTransport{next: cfg.Transport, secrets: secrets}
	if cfg.WrapTransport != nil {
		transport = cfg.WrapTransport(transport)
	}
	c := &Client{
		cfg: cfg, pool: pool, queries: queries.New(),
		http: &http.Client{
			// No Client.Timeout: do bounds each attempt with a context
			// deadline instead. With a Timeout, and a transport that is not
			// net/http's own (keyTransport wraps it), net/http cancels the
			// old way: two goroutines and a timer per request, several
			// percent of the CPU of a fan-out of cheap calls.
			Transport: transport,
			// A redirect is never followed: the key would go with it to
			// wherever it points. do reports it as the provider's error.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		rates:   map[Provider]*rateLimiter{},
		secrets: secrets,
		limitLowered: observability.NewSummary(cfg.Logger, cfg.SummaryInterval,
			"provider answered 429 under its BUILDRISK_RATE_<P>: its real limit is below the configured rate; lower the rate").WithLevel(slog.LevelWarn),
	}
	for p, rate := range cfg.Rates {
		c.rates[p] = newRateLimiter(c, p, rate)
	}
	c.origins = make(map[Provider]originOf, len(cfg.BaseURLs))
	for p, base := range cfg.BaseURLs {
		o, err := providerOrigin(base, cfg.AllowHTTP)
		c.origins[p] = originOf{origin: o, err: err}
	}
	return c, nil
}

// noteLimitLowered counts a 429 of p answered under its rate limit and logs
// the summary line when the previous one is SummaryInterval old: the first
// 429 is logged at once, later ones at most once an interval.
func (c *Client) noteLimitLowered(ctx context.Context, p Provider) {
	c.limitLowered.Add(string(p), 1)
	now, last := time.Now().UnixNano(), c.lastLimitLine.Load()
	if now-last >= int64(c.cfg.SummaryInterval) && c.lastLimitLine.CompareAndSwap(last, now) {
		c.limitLowered.Flush(ctx)
	}
}

// Secrets returns the redaction of the configured keys: the runner passes
// every message of a run, and every line it logs, through it.
func (c *Client) Secrets() *observability.Secrets { return c.secrets }

// RedactError returns err with every configured key, in any form it may be
// quoted in (see observability.NewSecrets), scrubbed from its text; errors.Is
// and errors.As still see its causes. The client's own errors are made so;
// the runner passes every error of a job through it, since a job's parsing
// of a provider's answer may quote whatever the provider put in a refusal.
func (c *Client) RedactError(err error) error { return c.secrets.RedactError(err) }

// DailyCap returns the provider's daily cap.
func (c *Client) DailyCap(p Provider) int { return c.cfg.DailyCaps[p] }

// RateLimit returns the provider's fleet-wide rate limit in calls per
// second (BUILDRISK_RATE_<P>); 0 when it has none.
func (c *Client) RateLimit(p Provider) float64 { return c.cfg.Rates[p] }

// UntilReset returns the time left before the budget day ends: the next
// midnight in the configured time zone, by the budget's clock (see Today).
func (c *Client) UntilReset() time.Duration {
	now := c.now().In(c.cfg.Location)
	return time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, c.cfg.Location).Sub(now)
}

// Day returns the calendar date of t in loc as midnight UTC (how a date
// column reads back): the day of call budgets and of a job's results.
func Day(t time.Time, loc *time.Location) time.Time {
	local := t.In(loc)
	return time.Date(local.Year(), local.Month(), local.Day(), 0, 0, 0, 0, time.UTC)
}

// Day returns the budget day of t in the configured time zone.
func (c *Client) Day(t time.Time) time.Time { return Day(t, c.cfg.Location) }

// Today returns the budget day in the configured time zone: of the
// database's clock (ClientConfig.Now when a test injects one), known as an
// offset from the process's clock read at every lease; before the first
// read it reads the database's clock (and falls back to the process's
// only when the database does not answer, which no lease could then
// charge anyway). It is also the day a job stamps its results with, so
// that tests crossing a day boundary move it too.
func (c *Client) Today() time.Time { return c.Day(c.now()) }

// now is the clock of the budget day (see Today).
func (c *Client) now() time.Time {
	if c.cfg.Now != nil {
		return c.cfg.Now()
	}
	if !c.dbClockRead.Load() && c.pool != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = c.syncClock(ctx, c.pool)
		cancel()
	}
	return c.cfg.ProcessClock().Add(time.Duration(c.dbOffset.Load()))
}

// syncClock reads the database's clock through db and keeps its offset
// from the process's (the midpoint of the round trip).
func (c *Client) syncClock(ctx context.Context, db queries.DBTX) error {
	if c.cfg.Now != nil {
		return nil
	}
	before := c.cfg.ProcessClock()
	dbNow, err := c.queries.DatabaseNow(ctx, db)
	if err != nil {
		return fmt.Errorf("error reading the database's clock: %w", err)
	}
	after := c.cfg.ProcessClock()
	mid := before.Add(after.Sub(before) / 2)
	c.dbOffset.Store(int64(dbNow.Sub(mid)))
	c.dbClockRead.Store(true)
	return nil
}

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

	waitMu sync.Mutex
	// waiting holds, per provider, the 429 that asked this execution to
	// wait past MaxBackoff; no call to the provider is made before its
	// Until.
	waiting map[Provider]*RateLimitedError
}

// NewCaller returns a Caller for one execution of job; maxCalls 0 means no
// per-execution limit.
func (c *Client) NewCaller(job string, maxCalls int) *Caller {
	cl := &Caller{
		client: c, job: job, maxCalls: maxCalls,
		leases: map[Provider]*lease{}, rate: map[Provider]float64{}, cappedOn: map[Provider]time.Time{},
		waiting: map[Provider]*RateLimitedError{},
	}
	cl.claimed = sync.NewCond(&cl.mu)
	return cl
}

// Today returns the client's Today: the execution's day in
// BUILDRISK_TIMEZONE from the injected clock.
func (cl *Caller) Today() time.Time { return cl.client.Today() }

// Calls returns the HTTP calls made so far (retries included).
func (cl *Caller) Calls() int64 { return cl.calls.Load() }

// Unspent returns the calls of provider p's daily cap the caller holds in
// its open lease and has not made yet: counted as used in the day's budget,
// yet still this execution's to make.
func (cl *Caller) Unspent(p Provider) int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	l := cl.leases[p]
	if l == nil || l.closed || l.dead {
		return 0
	}
	return max(l.granted-l.spent, 0)
}

// Get calls endpoint with query (the key is added here) and returns the
// body of a 2xx answer.
func (cl *Caller) Get(ctx context.Context, endpoint Endpoint, query url.Values) ([]byte, error) {
	c := cl.client
	provider := endpoint.Provider
	base, ok := c.cfg.BaseURLs[provider]
	if !ok || base == "" {
		return nil, fmt.Errorf("%s %s: no base URL configured (set BUILDRISK_UPSTREAM_URL or BUILDRISK_%s_URL)", provider, endpoint.Name, provider)
	}
	apiKey := c.cfg.Keys[provider]
	if apiKey == "" {
		return nil, fmt.Errorf("%s %s: %w (set %s)", provider, endpoint.Name, ErrNoKey, provider.KeyEnv())
	}
	origin := c.origins[provider]
	if origin.err != nil {
		return nil, fmt.Errorf("%s %s: %w", provider, endpoint.Name, origin.err)
	}
	// The URL built here has no key: keyTransport adds it at the last
	// moment, below tracing, so no span, error or log line can quote it,
	// and only to a request for the provider's own scheme and host.
	target := strings.TrimRight(base, "/") + endpoint.Path + "?" + query.Encode()
	ctx = context.WithValue(ctx, credentialKey{}, credential{param: provider.KeyParam(), value: apiKey, origin: origin.origin})

	limiter := c.rates[provider] // nil without a rate limit
	var lastStatus, attempts int
	var lastErr error
	for attempt := 1; attempt <= c.cfg.Attempts; attempt++ {
		attempts = attempt
		if err := cl.waitingFor(provider); err != nil {
			return nil, err // the provider said when: no call before then
		}
		// Reserve the call under maxCalls, then under the daily cap.
		if n := cl.calls.Add(1); cl.maxCalls > 0 && n > int64(cl.maxCalls) {
			cl.calls.Add(-1)
			// Counted like the daily cap (reason "cap"): a call the run's
			// own limit refused, as the alert rules and runbook say.
			c.cfg.Instruments.FanoutRejected(ctx, cl.job, observability.ReasonCap)
			return nil, fmt.Errorf("%w (%d)", ErrMaxCalls, cl.maxCalls)
		}
		if err := cl.take(ctx, provider); err != nil {
			cl.calls.Add(-1)
			if errors.Is(err, ErrCapped) {
				c.cfg.Instruments.FanoutRejected(ctx, cl.job, observability.ReasonCap)
			}
			return nil, err
		}
		if limiter != nil {
			// The call's slot of the fleet's schedule; ctx ending (a drain,
			// a stop, a lost ownership) ends the wait without a call.
			if err := limiter.wait(ctx); err != nil {
				cl.calls.Add(-1)
				return nil, err
			}
			// Another call of the execution may have been told to wait
			// while this one waited for its slot.
			if err := cl.waitingFor(provider); err != nil {
				cl.calls.Add(-1)
				return nil, err
			}
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
		if errors.Is(err, ErrResponseTooLarge) || errors.Is(err, ErrRedirect) {
			break // the same answer would come again
		}
		if status == http.StatusTooManyRequests && retryAfter > c.cfg.MaxBackoff {
			// The provider said when, and it is longer than a call waits:
			// stop calling it until then instead of paying for refusals.
			// Not a fan-out rejection: the run stops with cause
			// provider-rate, counted and alerted as such.
			if limiter != nil {
				c.noteLimitLowered(ctx, provider)
				// The fleet holds back as long as for any 429 (MaxBackoff):
				// each other run learns of the wait from its own call.
				if err := limiter.pause(ctx, c.cfg.MaxBackoff); err != nil {
					return nil, err
				}
			}
			return nil, cl.mustWait(provider, endpoint.Name, retryAfter)
		}
		wait := c.cfg.Backoff << (attempt - 1)
		if retryAfter > 0 {
			wait = retryAfter
		}
		wait = min(wait, c.cfg.MaxBackoff)
		if status == http.StatusTooManyRequests {
			if limiter == nil {
				c.cfg.Instruments.FanoutRejected(ctx, cl.job, observability.ReasonProvider429)
			} else {
				// Under our rate the provider still refused: its real limit
				// is lower. The whole fleet holds back for the wait.
				c.cfg.Instruments.FanoutRejected(ctx, cl.job, observability.ReasonProviderLimitLowered)
				c.noteLimitLowered(ctx, provider)
				if err := limiter.pause(ctx, wait); err != nil {
					return nil, err
				}
			}
		}
		if err == nil && status != http.StatusTooManyRequests && status < 500 {
			break // a 4xx other than 429 will not get better
		}
		if attempt == c.cfg.Attempts {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
	return nil, &CallError{Provider: provider, Endpoint: endpoint.Name, Key: endpoint.CallKey(query), Status: lastStatus, Attempts: attempts, Err: c.RedactError(lastErr)}
}

// mustWait records that the provider asked the execution to wait
// retryAfter (past MaxBackoff), from now and at most RetryAfterMax, and
// returns the *RateLimitedError saying so.
func (cl *Caller) mustWait(p Provider, endpoint string, retryAfter time.Duration) *RateLimitedError {
	wait := min(retryAfter, cl.client.cfg.RetryAfterMax)
	e := &RateLimitedError{Provider: p, Endpoint: endpoint, RetryAfter: retryAfter, Wait: wait, Until: time.Now().Add(wait)}
	cl.waitMu.Lock()
	defer cl.waitMu.Unlock()
	if prev := cl.waiting[p]; prev != nil && prev.Until.After(e.Until) {
		return prev
	}
	cl.waiting[p] = e
	return e
}

// waitingFor returns the *RateLimitedError of a provider that asked the
// execution to wait until a moment still ahead, or nil.
func (cl *Caller) waitingFor(p Provider) error {
	cl.waitMu.Lock()
	defer cl.waitMu.Unlock()
	if e := cl.waiting[p]; e != nil && time.Now().Before(e.Until) {
		return e
	}
	return nil
}

func (c *Client) do(ctx context.Context, target string) ([]byte, int, time.Duration, error) {
	// The attempt's deadline covers the answer's body too: it ends when do
	// returns, after the body is read.
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("error building request: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, 0, 0, errors.New(c.secrets.Redact(err.Error()))
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return nil, resp.StatusCode, 0, redirectError(req.URL, resp)
	}
	limit := c.cfg.MaxResponseBytes
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, resp.StatusCode, 0, fmt.Errorf("error reading body: %w", c.RedactError(err))
	}
	if int64(len(body)) > limit {
		return nil, resp.StatusCode, 0, fmt.Errorf("%w: over %d bytes", ErrResponseTooLarge, limit)
	}
	return body, resp.StatusCode, parseRetryAfter(resp.Header, time.Now()), nil
}

// parseRetryAfter returns the wait a response's Retry-After asks for (RFC
// 9110, section 10.2.3): delay-seconds, or an HTTP-date in any of the three
// formats http.ParseTime reads. A date is measured from the response's own
// Date when it has a valid one, so that a provider whose clock is off from
// now's still gets the wait it meant; otherwise from now. It returns 0 for
// no header, a malformed one or a date that has passed, and at most
// RetryAfterLimit.
func parseRetryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if v[0] >= '0' && v[0] <= '9' {
		// delay-seconds is 1*DIGIT: no sign, no fraction.
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			if errors.Is(err, strconv.ErrRange) {
				return RetryAfterLimit
			}
			return 0
		}
		if secs >= uint64(RetryAfterLimit/time.Second) {
			return RetryAfterLimit
		}
		return time.Duration(secs) * time.Second
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	if date, err := http.ParseTime(h.Get("Date")); err == nil {
		now = date
	}
	return min(max(at.Sub(now), 0), RetryAfterLimit)
}

// ErrRedirect is a provider answering a redirect: it is never followed (the
// key would go with it) and not retried.
var ErrRedirect = errors.New("provider answered a redirect")

// redirectError names the status and the host the Location points to, never
// its path or query (which may carry anything).
func redirectError(from *url.URL, resp *http.Response) error {
	host := "no Location"
	if loc, err := from.Parse(resp.Header.Get("Location")); err == nil && loc.Host != "" {
		host = loc.Scheme + "://" + loc.Host
	}
	return fmt.Errorf("%w: HTTP %d redirect to %s, not followed", ErrRedirect, resp.StatusCode, host)
}

// origin is a provider's scheme and host: the only place its key goes.
type origin struct{ scheme, host string }

// originOf is a provider's origin, or the reason its base URL has none.
type originOf struct {
	origin origin
	err    error
}

// providerOrigin parses a base URL and returns its origin; an http URL is
// refused unless allowHTTP.
func providerOrigin(base string, allowHTTP bool) (origin, error) {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return origin{}, fmt.Errorf("%q is not an absolute URL", observability.Redact(base))
	}
	switch scheme := strings.ToLower(u.Scheme); {
	case scheme == "https", scheme == "http" && allowHTTP:
		return origin{scheme: scheme, host: strings.ToLower(u.Host)}, nil
	case scheme == "http":
		return origin{}, fmt.Errorf("%q is not https (plain http only with BUILDRISK_INSECURE_HTTP_UPSTREAM=1, for a fake upstream)", observability.Redact(base))
	default:
		return origin{}, fmt.Errorf("%q is not an https URL", observability.Redact(base))
	}
}

// credentialKey is the context key of the credential keyTransport adds.
type credentialKey struct{}

// credential is a provider key, the query parameter that carries it and the
// origin it may be sent to.
type credential struct {
	param, value string
	origin       origin
}

// keyTransport adds the provider key of the request's context to its query
// just before the request leaves the process, and only to a request for the
// provider's configured scheme and host. It is the innermost transport:
// tracing wraps it and the http.Client's errors quote the request it was
// given, so neither ever sees the key.
type keyTransport struct {
	next http.RoundTripper
	// secrets redact the keys from the errors of next.
	secrets *observability.Secrets
}

// RoundTrip implements http.RoundTripper.
func (t *keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	cred, ok := r.Context().Value(credentialKey{}).(credential)
	if !ok || !strings.EqualFold(r.URL.Scheme, cred.origin.scheme) || !strings.EqualFold(r.URL.Host, cred.origin.host) {
		// No key, or a request for anywhere but the provider: sent as is.
		return t.next.RoundTrip(r)
	}
	// A RoundTripper must not modify its request: the keyed one is a copy
	// with its own URL (the rest is only read on the way out).
	keyed := new(http.Request)
	*keyed = *r
	u := *r.URL
	u.RawQuery = withParam(u.RawQuery, cred.param, cred.value)
	keyed.URL = &u
	resp, err := t.next.RoundTrip(keyed)
	if err != nil {
		return nil, t.secrets.RedactError(err)
	}
	resp.Request = r // what callers read back is the request without the key
	return resp, nil
}

// withParam returns the encoded query rawQuery with param set to value: the
// pair is appended, unless rawQuery already holds param, which is then
// replaced (the query parsed and encoded again).
func withParam(rawQuery, param, value string) string {
	pair := url.QueryEscape(param) + "=" + url.QueryEscape(value)
	if rawQuery == "" {
		return pair
	}
	if !strings.HasPrefix(rawQuery, param+"=") && !strings.Contains(rawQuery, "&"+param+"=") {
		return rawQuery + "&" + pair
	}
	q, _ := url.ParseQuery(rawQuery)
	q.Set(param, value)
	return q.Encode()
}

package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/sql/pgtest"
	"github.com/buildrisk/radar/sql/pgtx"
	"github.com/buildrisk/radar/upstream"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func newClient(t *testing.T, pool *pgxpool.Pool, baseURL string, caps map[upstream.Provider]int) (*upstream.Client, *observability.Providers) {
	t.Helper()
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	client, err := upstream.NewClient(pool, upstream.ClientConfig{
		BaseURLs:    map[upstream.Provider]string{upstream.ProviderMOLIT: baseURL},
		Keys:        map[upstream.Provider]string{upstream.ProviderMOLIT: "secret-key-value"},
		DailyCaps:   caps,
		AllowHTTP:   true,
		Backoff:     10 * time.Millisecond,
		Instruments: instruments,
	})
	require.NoError(t, err)
	return client, providers
}

// A 429 is retried after the Retry-After the provider asked for.
func TestClient_RetryAfter(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	var firstAt, secondAt time.Time
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			firstAt = time.Now()
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		secondAt = time.Now()
		_, _ = w.Write([]byte("ok"))
	}))
	defer server.Close()
	client, providers := newClient(t, pgtest.NewPool(t), server.URL, nil)

	caller := client.NewCaller("aptTrade", 0)
	body, err := caller.Get(context.Background(), upstream.EndpointAptTrade, upstream.AptTradeQuery("11110", "202501", 1, 10))
	require.NoError(t, err)
	require.Equal(t, "ok", string(body))
	require.Equal(t, int32(2), calls.Load())
	require.GreaterOrEqual(t, secondAt.Sub(firstAt), time.Second, "waited the Retry-After, not the 10ms backoff")
	v, err := observabilitytest.MetricValue(providers, "buildrisk_fanout_rejections_total", map[string]string{"job": "aptTrade", "reason": "provider_429"})
	require.NoError(t, err)
	require.Equal(t, float64(1), v)
}

// A provider's broken body (cut short of its Content-Length, or stalled
// until the attempt's timeout) costs the client's attempts and ends in a
// CallError naming the provider, which the database side of the error
// classification never takes for a database outage (pgtx.IsTransient),
// however the transport error underneath reads.
func TestClient_BrokenBodyIsTheProviders(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	for name, cfg := range map[string]fakeupstream.Config{
		"CutBody":  {CutBodyRate: 1},
		"HangBody": {HangBodyRate: 1},
		"Garbage":  {GarbageRate: 1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake := fakeupstream.New(cfg)
			server := httptest.NewServer(fake)
			defer server.Close()
			providers, _ := observabilitytest.NewProviders()
			instruments, err := observability.NewInstruments(providers.Meter)
			require.NoError(t, err)
			client, err := upstream.NewClient(pool, upstream.ClientConfig{
				BaseURLs:    map[upstream.Provider]string{upstream.ProviderMOLIT: server.URL},
				Keys:        map[upstream.Provider]string{upstream.ProviderMOLIT: "secret-key-value"},
				AllowHTTP:   true, // the fake upstream
				Backoff:     time.Millisecond,
				Instruments: instruments,
				// The hanging body ends at this timeout, while the body is read.
				RequestTimeout: 300 * time.Millisecond,
			})
			require.NoError(t, err)
			body, err := client.NewCaller("aptTrade", 0).Get(context.Background(), upstream.EndpointAptTrade, upstream.AptTradeQuery("11110", "202501", 1, 10))
			if name == "Garbage" {
				require.NoError(t, err, "a 200 in the wrong format is the parser's to judge")
				require.Contains(t, string(body), "injected garbage")
				return
			}
			var callErr *upstream.CallError
			require.ErrorAs(t, err, &callErr)
			require.Equal(t, upstream.ProviderMOLIT, callErr.Provider)
			require.Equal(t, 3, callErr.Attempts)
			require.Contains(t, err.Error(), "MOLIT aptTrade")
			require.False(t, pgtx.IsTransient(err), "a provider's body is no database error: %v", err)
			require.False(t, pgtx.IsTransient(fmt.Errorf("chunk 11110:202501: %w", err)), "nor once wrapped")
			require.Equal(t, int64(3), fake.Stats().Total, "the client's 3 attempts, no more")
		})
	}
}

// A call that keeps failing names provider, endpoint, call and status, and
// never leaks the key; a 4xx is not retried.
func TestClient_FailureMessage(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.New(fakeupstream.Config{FailKeys: map[string][]string{"aptTrade": {"11110:202501"}}})
	server := httptest.NewServer(fake)
	defer server.Close()
	client, _ := newClient(t, pgtest.NewPool(t), server.URL, nil)

	_, err := client.NewCaller("aptTrade", 0).Get(context.Background(), upstream.EndpointAptTrade, upstream.AptTradeQuery("11110", "202501", 1, 10))
	var callErr *upstream.CallError
	require.ErrorAs(t, err, &callErr)
	require.Equal(t, "MOLIT aptTrade 11110:202501: HTTP 500 after 3 attempts", err.Error())
	require.NotContains(t, err.Error(), "secret-key-value")
	require.Equal(t, int64(3), fake.Stats().Calls["aptTrade"]["11110:202501"])

	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	client, _ = newClient(t, pgtest.NewPool(t), notFound.URL, nil)
	_, err = client.NewCaller("aptTrade", 0).Get(context.Background(), upstream.EndpointAptTrade, upstream.AptTradeQuery("11110", "202501", 1, 10))
	require.Contains(t, err.Error(), "HTTP 404 after 1 attempts")

	closed := httptest.NewServer(http.NotFoundHandler())
	url := closed.URL
	closed.Close()
	client, _ = newClient(t, pgtest.NewPool(t), url, nil)
	_, err = client.NewCaller("aptTrade", 0).Get(context.Background(), upstream.EndpointAptTrade, upstream.AptTradeQuery("11110", "202501", 1, 10))
	require.Error(t, err)
	require.NotContains(t, err.Error(), "secret-key-value")
}

// The daily cap is shared in PostgreSQL: many executions at once, in two
// worker processes, never exceed it, none is refused while another's unspent
// lease can still come back, and the refusal is ErrCapped, counted as capped.
func TestClient_DailyCapShared(t *testing.T) {
	t.Parallel()
	var served atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		_, _ = w.Write([]byte("ok"))
	}))
	defer server.Close()
	pool := pgtest.NewPool(t)
	client, providers := newClient(t, pool, server.URL, map[upstream.Provider]int{upstream.ProviderMOLIT: 25})
	other, _ := newClient(t, pool, server.URL, map[upstream.Provider]int{upstream.ProviderMOLIT: 25})

	var wg sync.WaitGroup
	var ok, capped atomic.Int32
	for i := range 40 {
		c := client
		if i%2 == 1 {
			c = other // a second worker process sharing the database
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			caller := c.NewCaller("aptTrade", 0)
			_, err := caller.Get(context.Background(), upstream.EndpointAptTrade, upstream.AptTradeQuery("11110", "202501", 1, 10))
			require.NoError(t, caller.Release(context.Background()), "an execution returns its unspent lease when it ends")
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, upstream.ErrCapped):
				capped.Add(1)
				require.True(t, strings.Contains(err.Error(), "MOLIT"))
			default:
				t.Errorf("unexpected error: %v", err)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int32(25), ok.Load())
	require.Equal(t, int32(15), capped.Load())
	require.Equal(t, int32(25), served.Load())
	remaining, err := client.Remaining(context.Background(), upstream.ProviderMOLIT)
	require.NoError(t, err)
	require.Equal(t, 0, remaining)
	v, err := observabilitytest.MetricValue(providers, "buildrisk_external_calls_total", map[string]string{"provider": "MOLIT", "outcome": "capped"})
	require.NoError(t, err)
	require.Greater(t, v, float64(0))
}

// maxCalls caps one execution only.
func TestClient_MaxCalls(t *testing.T) {
	t.Parallel()
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer server.Close()
	client, _ := newClient(t, pgtest.NewPool(t), server.URL, nil)
	caller := client.NewCaller("aptTrade", 2)
	q := upstream.AptTradeQuery("11110", "202501", 1, 10)
	for range 2 {
		_, err := caller.Get(context.Background(), upstream.EndpointAptTrade, q)
		require.NoError(t, err)
	}
	_, err := caller.Get(context.Background(), upstream.EndpointAptTrade, q)
	require.ErrorIs(t, err, upstream.ErrMaxCalls)
	_, err = client.NewCaller("aptTrade", 2).Get(context.Background(), upstream.EndpointAptTrade, q)
	require.NoError(t, err, "a new execution has its own maxCalls")
}

// The one redaction rule knows every provider's key parameter.
func TestKeyParamsAreRedacted(t *testing.T) {
	t.Parallel()
	for _, p := range upstream.Providers {
		u := "http://h/p?a=1&" + p.KeyParam() + "=secret-value&b=2"
		require.NotContains(t, observability.Redact(u), "secret-value", p)
		require.Contains(t, observability.SecretQueryParams, p.KeyParam(), p)
	}
}

// A provider answer over the limit fails with a clear error after reading
// at most the limit, and is not retried; one at the limit is read whole.
func TestClient_ResponseLimit(t *testing.T) {
	t.Parallel()
	const limit = 4096
	var calls atomic.Int32
	var size atomic.Int64
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = w.Write([]byte(strings.Repeat("x", int(size.Load()))))
	}))
	defer server.Close()
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	client, err := upstream.NewClient(pgtest.NewPool(t), upstream.ClientConfig{
		BaseURLs:         map[upstream.Provider]string{upstream.ProviderMOLIT: server.URL},
		Keys:             map[upstream.Provider]string{upstream.ProviderMOLIT: "k"},
		Backoff:          time.Millisecond,
		MaxResponseBytes: limit,
		AllowHTTP:        true,
		Instruments:      instruments,
	})
	require.NoError(t, err)
	query := upstream.AptTradeQuery("11110", "202501", 1, 10)

	size.Store(limit)
	body, err := client.NewCaller("aptTrade", 0).Get(context.Background(), upstream.EndpointAptTrade, query)
	require.NoError(t, err)
	require.Len(t, body, limit)

	size.Store(10 << 20)
	calls.Store(0)
	_, err = client.NewCaller("aptTrade", 0).Get(context.Background(), upstream.EndpointAptTrade, query)
	require.ErrorIs(t, err, upstream.ErrResponseTooLarge)
	require.ErrorContains(t, err, "over 4096 bytes")
	require.Equal(t, int32(1), calls.Load(), "not retried")
}

// A provider answering a redirect to another host never delivers the key
// there: the redirect is not followed, it is a provider error naming the
// Location's host (not its query), and it is not retried.
func TestClient_RedirectNeverCarriesTheKey(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int32
	var leaked atomic.Bool
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		if strings.Contains(r.URL.RawQuery, "secret-key-value") {
			leaked.Store(true)
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer other.Close()
	var calls atomic.Int32
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Redirect(w, r, other.URL+"/steal?token=query-secret", http.StatusFound)
	}))
	defer provider.Close()
	client, _ := newClient(t, pgtest.NewPool(t), provider.URL, nil)

	_, err := client.NewCaller("aptTrade", 0).Get(context.Background(), upstream.EndpointAptTrade, upstream.AptTradeQuery("11110", "202501", 1, 10))
	require.Error(t, err)
	require.False(t, leaked.Load(), "the key reached the redirect's host")
	require.Equal(t, int32(0), elsewhere.Load(), "the redirect was followed")
	require.Equal(t, int32(1), calls.Load(), "a redirect is not retried")
	require.ErrorIs(t, err, upstream.ErrRedirect)
	require.Contains(t, err.Error(), "redirect to "+other.URL+", not followed")
	require.NotContains(t, err.Error(), "query-secret")
	require.NotContains(t, err.Error(), "secret-key-value")
}

// Provider URLs must be https unless AllowHTTP (dev, tests) says otherwise.
func TestClient_RequiresHTTPS(t *testing.T) {
	t.Parallel()
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	cfg := upstream.ClientConfig{
		BaseURLs:    map[upstream.Provider]string{upstream.ProviderMOLIT: "http://provider.example"},
		Instruments: instruments,
	}
	_, err = upstream.NewClient(nil, cfg)
	require.ErrorContains(t, err, "https")
	cfg.AllowHTTP = true
	_, err = upstream.NewClient(nil, cfg)
	require.NoError(t, err)
	cfg.BaseURLs[upstream.ProviderMOLIT] = "https://provider.example"
	cfg.AllowHTTP = false
	_, err = upstream.NewClient(nil, cfg)
	require.NoError(t, err)
}

// The key transport sets the key parameter on the encoded query: appended
// when the query has none, replacing one it already holds, escaped.
func TestWithParam(t *testing.T) {
	for _, c := range []struct{ raw, want string }{
		{"", "key=v%2B1"},
		{"date=20260101", "date=20260101&key=v%2B1"},
		{"xkey=1&date=2", "xkey=1&date=2&key=v%2B1"},
		{"key=old&date=2", "date=2&key=v%2B1"},
		{"date=2&key=old", "date=2&key=v%2B1"},
	} {
		require.Equal(t, c.want, upstream.WithParam(c.raw, "key", "v+1"), "query %q", c.raw)
	}
}

// A 429 whose Retry-After asks for longer than the client waits within a
// call (MaxBackoff) is an instruction, not a transient refusal: the call is
// not retried (every attempt is paid for and would be refused again) and
// returns a *RateLimitedError saying until when, after exactly one attempt.
// The execution's further calls to the provider are not made until then.
// Retry-After may be delay-seconds or an HTTP-date (RFC 9110, 10.2.3); a
// date is measured from the answer's Date, and the wait is bounded by
// RetryAfterMax.
func TestClient_RetryAfterPastTheBackoffStops(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	for name, tc := range map[string]struct {
		header     func(date time.Time) string
		want, wait time.Duration
	}{
		"Seconds":        {header: func(time.Time) string { return "3600" }, want: time.Hour, wait: time.Hour},
		"HTTPDate":       {header: func(date time.Time) string { return date.Add(2 * time.Hour).Format(http.TimeFormat) }, want: 2 * time.Hour, wait: 2 * time.Hour},
		"PastTheMaximum": {header: func(time.Time) string { return "86400" }, want: 24 * time.Hour, wait: upstream.RetryAfterMaxDefault},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var hits atomic.Int32
			server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				// A provider's clock three hours off this process's: an
				// HTTP-date is read against the answer's own Date.
				date := time.Now().Add(-3 * time.Hour).UTC().Truncate(time.Second)
				w.Header().Set("Date", date.Format(http.TimeFormat))
				w.Header().Set("Retry-After", tc.header(date))
				w.WriteHeader(http.StatusTooManyRequests)
			}))
			defer server.Close()
			client, providers := newClient(t, pool, server.URL, nil)
			caller := client.NewCaller("aptTrade", 0)

			before := time.Now()
			_, err := caller.Get(context.Background(), upstream.EndpointAptTrade, upstream.AptTradeQuery("11110", "202501", 1, 10))
			after := time.Now()
			var rateErr *upstream.RateLimitedError
			require.ErrorAs(t, err, &rateErr)
			require.Equal(t, int32(1), hits.Load(), "one attempt: the wait is past MaxBackoff, a retry would be refused again")
			require.Equal(t, upstream.ProviderMOLIT, rateErr.Provider)
			require.Equal(t, tc.want, rateErr.RetryAfter)
			require.Equal(t, tc.wait, rateErr.Wait)
			require.False(t, rateErr.Until.Before(before.Add(tc.wait)), "until %s, want %s after the call", rateErr.Until, tc.wait)
			require.False(t, rateErr.Until.After(after.Add(tc.wait)), "until %s, want %s after the call", rateErr.Until, tc.wait)
			require.Contains(t, err.Error(), "MOLIT aptTrade")
			require.False(t, pgtx.IsTransient(err), "a provider's answer is no database error")
			var callErr *upstream.CallError
			require.False(t, errors.As(err, &callErr), "not a failed call: an instruction to wait")

			_, err = caller.Get(context.Background(), upstream.EndpointAptTrade, upstream.AptTradeQuery("11110", "202502", 1, 10))
			require.ErrorAs(t, err, &rateErr, "the execution's next call waits for the provider too")
			require.Equal(t, int32(1), hits.Load(), "and is not made")
			require.Equal(t, int64(1), caller.Calls())

			plain, err := observabilitytest.MetricValue(providers, "buildrisk_fanout_rejections_total", map[string]string{"job": "aptTrade", "reason": observability.ReasonProvider429})
			require.NoError(t, err)
			require.Zero(t, plain, "the run stops with cause provider-rate, counted there: not a fan-out rejection that pages")
		})
	}
}

// A Retry-After within MaxBackoff keeps today's behaviour in either form:
// the call is retried after the wait the provider asked for. An HTTP-date
// two seconds after the answer's Date is a two-second wait.
func TestClient_RetryAfterHTTPDateWithinTheBackoff(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	var firstAt, secondAt time.Time
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			firstAt = time.Now()
			date := time.Now().UTC().Truncate(time.Second)
			w.Header().Set("Date", date.Format(http.TimeFormat))
			w.Header().Set("Retry-After", date.Add(2*time.Second).Format(http.TimeFormat))
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		secondAt = time.Now()
		_, _ = w.Write([]byte("ok"))
	}))
	defer server.Close()
	client, _ := newClient(t, pgtest.NewPool(t), server.URL, nil)

	body, err := client.NewCaller("aptTrade", 0).Get(context.Background(), upstream.EndpointAptTrade, upstream.AptTradeQuery("11110", "202501", 1, 10))
	require.NoError(t, err)
	require.Equal(t, "ok", string(body))
	require.Equal(t, int32(2), calls.Load())
	require.GreaterOrEqual(t, secondAt.Sub(firstAt), 2*time.Second, "waited the date's two seconds, not the 10ms backoff")
}

// The parser of Retry-After (RFC 9110, 10.2.3): delay-seconds or an
// HTTP-date in any of its three formats, measured from the answer's Date
// when it has one; anything else is no Retry-After.
func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		value, date string
		want        time.Duration
	}{
		{"120", "", 2 * time.Minute},
		{" 7 ", "", 7 * time.Second},
		{"0", "", 0},
		{"-5", "", 0},
		{"+5", "", 0},
		{"1.5", "", 0},
		{"soon", "", 0},
		{"", "", 0},
		{"99999999999999999999", "", upstream.RetryAfterLimit},
		{"Sun, 01 Mar 2026 13:00:00 GMT", "", time.Hour},
		{"Sunday, 01-Mar-26 13:00:00 GMT", "", time.Hour},
		{"Sun Mar  1 13:00:00 2026", "", time.Hour},
		{"Sun, 01 Mar 2026 11:00:00 GMT", "", 0},
		// The provider's clock is an hour behind: its date means an hour
		// from its Date, not from ours.
		{"Sun, 01 Mar 2026 12:00:00 GMT", "Sun, 01 Mar 2026 11:00:00 GMT", time.Hour},
		{"Sun, 01 Mar 2026 13:00:00 GMT", "garbage", time.Hour},
	} {
		h := http.Header{}
		if c.value != "" {
			h.Set("Retry-After", c.value)
		}
		if c.date != "" {
			h.Set("Date", c.date)
		}
		require.Equal(t, c.want, upstream.ParseRetryAfter(h, now), "Retry-After %q, Date %q", c.value, c.date)
	}
}

// An error below the client that quotes the key, bare or in the keyed URL
// (a proxy's refusal, say), reaches the caller with the key scrubbed in
// every form.
func TestClient_ErrorsNeverQuoteTheKey(t *testing.T) {
	t.Parallel()
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	const key = "KEYCANARY+client/7f&3a=="
	client, err := upstream.NewClient(pgtest.NewPool(t), upstream.ClientConfig{
		BaseURLs:  map[upstream.Provider]string{upstream.ProviderMOLIT: "http://provider.example"},
		Keys:      map[upstream.Provider]string{upstream.ProviderMOLIT: key},
		AllowHTTP: true, Backoff: time.Millisecond, Attempts: 2, Instruments: instruments,
		Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return nil, fmt.Errorf("proxy: unregistered key %s (%s, %s): %w", r.URL.Query().Get("serviceKey"), r.URL.RequestURI(),
				url.PathEscape(key), errors.New("refused"))
		}),
	})
	require.NoError(t, err)

	_, err = client.NewCaller("aptTrade", 0).Get(context.Background(), upstream.EndpointAptTrade, upstream.AptTradeQuery("11110", "202501", 1, 10))
	var callErr *upstream.CallError
	require.ErrorAs(t, err, &callErr)
	require.Contains(t, err.Error(), "unregistered key REDACTED")
	require.NotContains(t, err.Error(), "KEYCANARY")
	require.NotContains(t, err.Error(), "7f")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

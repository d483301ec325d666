package app

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/upstream"
)

// NewWorkerID returns pid@hostname#boot and its parts: boot is random per
// start, because in a container the pid is always 1.
func NewWorkerID() (id, hostname, boot string) {
	hostname, _ = os.Hostname()
	if hostname == "" {
		hostname = "localhost"
	}
	buf := make([]byte, 4)
	_, _ = rand.Read(buf)
	boot = hex.EncodeToString(buf)
	return fmt.Sprintf("%d@%s#%s", os.Getpid(), hostname, boot), hostname, boot
}

// NewUpstream returns the provider client of a process; holder (the worker
// id) names the process in the leases of the daily caps it takes.
//
// After each move of the database the process's watch sees (a failover),
// the client re-asserts its call ledger (upstream.Client.Reassert): the
// charges of the leases it took that the new primary lacks.
func NewUpstream(pool *pgxpool.Pool, env *config.Config, tel *Telemetry, holder string) (*upstream.Client, error) {
	client, err := newUpstreamClient(pool, env, tel, holder)
	if err != nil {
		return nil, err
	}
	tel.Database.Subscribe(func(worker.DatabaseMove) { client.ReassertAfterFailover() })
	return client, nil
}

// newUpstreamClient builds the provider client of NewUpstream.
func newUpstreamClient(pool *pgxpool.Pool, env *config.Config, tel *Telemetry, holder string) (*upstream.Client, error) {
	return upstream.NewClient(pool, upstream.ClientConfig{
		BaseURLs: env.UpstreamURLs, Keys: env.Keys, DailyCaps: env.DailyCaps, Rates: env.Rates, Location: env.Location,
		Logger: tel.Logger,
		Now:    env.Now, Instruments: tel.Instruments, FanOut: env.FanOut, Holder: holder,
		RequestTimeout: env.ProviderTimeout,
		AllowHTTP:      env.InsecureHTTPUpstream,
		Transport:      ProviderTransport(env.FanOut),
		WrapTransport:  providerTracing(tel.Providers),
	})
}

// providerTracing makes provider calls client spans (the key is added below
// them) when spans are recorded. When no exporter will read them it leaves
// the wrapper out: at fan-out 64 the span, its attributes and otelhttp's
// own metrics cost more CPU per call than the key, the budget and the
// request together (BENCHMARKS.md).
func providerTracing(providers *observability.Providers) func(http.RoundTripper) http.RoundTripper {
	if !providers.SpansRecorded {
		return nil
	}
	return func(rt http.RoundTripper) http.RoundTripper {
		return otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(providers.Tracer), otelhttp.WithMeterProvider(providers.Meter))
	}
}

// ProviderTransport keeps as many idle connections per provider as the
// fan-out has slots, so pooled calls reuse connections instead of dialling.
func ProviderTransport(fanOut int) http.RoundTripper {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = max(fanOut, 8)
	return transport
}

package app_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/buildrisk/radar/exposure"
	"github.com/buildrisk/radar/jobs/apttrade"
	"github.com/buildrisk/radar/jobs/corpcode"
	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/jobs/filing"
	"github.com/buildrisk/radar/jobs/stockprice"
	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// Provider keys never leave the worker: every provider job runs through
// 500s, 429s with retries and timeouts, and no exported span, log line,
// stored row, metric or API answer holds any key, in any encoding.
func TestRedaction_ProviderKeysNeverLeave(t *testing.T) {
	t.Parallel()
	keys := map[string]string{
		"BUILDRISK_KEY_MOLIT":  "molitKey+Secret/7f3a==",
		"BUILDRISK_KEY_DART":   "dartKeySecret9b21c4",
		"BUILDRISK_KEY_KRX":    "krx%Secret&5d60",
		"BUILDRISK_KEY_CREDIT": "creditKeySecret0e88",
	}
	logs := &apptest.SyncBuffer{}
	s := apptest.New(t, &apptest.Opts{Env: keys, Fake: fakeupstream.Config{Companies: 120}, Logs: logs})
	dir := t.TempDir()
	tune := func(_ *worker.Config, rc *batch.Config) { rc.Jobs[corpcode.Name] = corpcode.Job{Dir: dir} }
	first, _ := s.StartWorkerWith(s.Pool, tune)
	s.RunJob(corpcode.Name, `{}`)
	_, err := exposure.Seed(context.Background(), s.Pool, s.Fake.Companies())
	require.NoError(t, err)

	// Errors and 429s (Retry-After) on every endpoint: calls are retried and
	// some runs fail with the provider's errors in their messages.
	s.Fake.SetConfig(fakeupstream.Config{Companies: 120, ErrorRate: 0.3, Rate429: 0.1})
	bodies := map[string]string{
		filing.Name:     `{"params":{"from":"2025-01-01","to":"2025-01-31"}}`,
		stockprice.Name: `{"params":{"date":"2025-03-14"}}`,
		apttrade.Name:   apptest.AptTradeBody([]string{"11110", "11140"}, "2025-01", "2025-03"),
		credit.Name:     `{"params":{}}`,
		corpcode.Name:   `{}`,
	}
	var ids []string
	for _, job := range []string{filing.Name, stockprice.Name, apttrade.Name, credit.Name, corpcode.Name} {
		id := s.RequestJob(job, bodies[job])["requestId"].(string)
		s.WaitRequest(id, "DONE", "FAILED")
		ids = append(ids, id)
	}
	require.Positive(t, s.Metric(observability.MetricExternalCalls, map[string]string{"outcome": observability.CallError}))
	require.Positive(t, s.Metric("buildrisk_fanout_rejections_total", map[string]string{"reason": observability.ReasonProvider429}))

	// Timeouts: a worker whose provider calls time out.
	require.NoError(t, first.Stop(context.Background()))
	s.Fake.SetConfig(fakeupstream.Config{Companies: 120, Latency: 2 * time.Second})
	s.Env.ProviderTimeout = 20 * time.Millisecond
	s.StartWorkerWith(s.Pool, tune)
	for _, job := range []string{apttrade.Name, corpcode.Name} {
		body := bodies[job]
		if job == apttrade.Name {
			body = apptest.AptTradeBody([]string{"11215"}, "2025-01", "2025-01")
		}
		id := s.RequestJob(job, body)["requestId"].(string)
		done := s.WaitRequest(id, "FAILED")
		require.Regexp(t, `Client.Timeout|deadline exceeded`, fmt.Sprint(done), "the run failed on the timeout")
		ids = append(ids, id)
	}

	// Everything that could quote a URL.
	var seen strings.Builder
	for _, span := range s.Spans.Ended() {
		writeSpan(&seen, span)
	}
	require.NotZero(t, seen.Len())
	require.Contains(t, seen.String(), "url.full", "provider calls were traced")
	seen.WriteString(logs.String())
	for _, table := range []string{"job_request", "job_execution", "job_checkpoint", "job_instance", "river_job", "worker", "corp_code_download"} {
		var rows string
		require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(t::text, E'\n'), '') FROM `+table+` t`).Scan(&rows))
		seen.WriteString(rows)
	}
	for _, path := range append([]string{"/v1/jobs", "/v1/workers", "/v1/requests?limit=500", "/metrics"}, prefixed("/v1/requests/", ids)...) {
		seen.WriteString(s.Raw(path))
	}
	text := seen.String()
	require.Contains(t, text, "after 3 attempts", "provider errors were recorded")
	for name, key := range keys {
		for _, form := range []string{key, url.QueryEscape(key), url.PathEscape(key)} {
			if i := strings.Index(text, form); i >= 0 {
				t.Fatalf("%s leaked: ...%s...", name, text[max(i-200, 0):min(i+len(form)+20, len(text))])
			}
		}
	}
}

// A provider whose refusal quotes the key (raw, and URL-encoded in the
// request's URL it echoes) is answered over real HTTP by every endpoint:
// the refusals are recorded as the runs' messages, and the key, in any
// form, is in no stored row, API answer, log line or span.
func TestRedaction_ProviderErrorQuotingTheKey(t *testing.T) {
	t.Parallel()
	keys := map[string]string{
		"BUILDRISK_KEY_MOLIT":  "KEYCANARYmolit+Secret/7f3a==",
		"BUILDRISK_KEY_DART":   "KEYCANARYdart&Secret=9b21",
		"BUILDRISK_KEY_KRX":    "KEYCANARYkrx%Secret;5d60",
		"BUILDRISK_KEY_CREDIT": "KEYCANARYcredit~Secret0e88",
	}
	logs := &apptest.SyncBuffer{}
	s := apptest.New(t, &apptest.Opts{Env: keys, Fake: fakeupstream.Config{Companies: 40}, Logs: logs})
	dir := t.TempDir()
	s.StartWorkerWith(s.Pool, func(_ *worker.Config, rc *batch.Config) { rc.Jobs[corpcode.Name] = corpcode.Job{Dir: dir} })
	s.RunJob(corpcode.Name, `{}`)
	_, err := exposure.Seed(context.Background(), s.Pool, s.Fake.Companies())
	require.NoError(t, err)

	s.Fake.SetConfig(fakeupstream.Config{Companies: 40, QuoteKey: true})
	var ids []string
	for job, body := range map[string]string{
		corpcode.Name:   `{}`,
		filing.Name:     `{"params":{"from":"2025-01-01","to":"2025-01-31"}}`,
		stockprice.Name: `{"params":{"date":"2025-03-14"}}`,
		apttrade.Name:   apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"),
		credit.Name:     `{"params":{}}`,
	} {
		id := s.RequestJob(job, body)["requestId"].(string)
		s.WaitRequest(id, "DONE", "FAILED")
		ids = append(ids, id)
	}

	var seen strings.Builder
	for _, span := range s.Spans.Ended() {
		writeSpan(&seen, span)
	}
	seen.WriteString(logs.String())
	for _, table := range []string{"job_request", "job_execution", "job_checkpoint", "job_instance", "river_job", "worker", "corp_code_download"} {
		var rows string
		require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(t::text, E'\n'), '') FROM `+table+` t`).Scan(&rows))
		seen.WriteString(rows)
	}
	for _, path := range append([]string{"/v1/jobs", "/v1/workers", "/v1/requests?limit=500", "/metrics"}, prefixed("/v1/requests/", ids)...) {
		seen.WriteString(s.Raw(path))
	}
	text := seen.String()
	require.Contains(t, text, `provider code \"010\" (unregistered key `, "DART's refusal was recorded")
	require.Contains(t, text, `provider code \"30\" (unregistered key `, "data.go.kr's refusal was recorded")
	for name, key := range keys {
		forms := []string{"KEYCANARY", base64.StdEncoding.EncodeToString([]byte(key)), base64.RawURLEncoding.EncodeToString([]byte(key))}
		for _, form := range forms {
			if i := strings.Index(text, form); i >= 0 {
				t.Fatalf("%s leaked: ...%s...", name, text[max(i-200, 0):min(i+len(form)+40, len(text))])
			}
		}
	}
}

// A provider refusing every call with the key quoted back in each form of
// fakeupstream.QuotedKeyForms (raw, upper-case, percent-encoded both ways,
// '+' as a space, hex, base64 at every alignment, HTML numeric, a prefix
// one short, JSON-escaped, the URL as received, and decoded for a key
// configured percent-encoded), during aptTrade, filingParse and
// corpCodeSync: no run of 12 characters of any form reaches a viewer's
// answers, the stored rows (River's job errors included), the logs or the
// spans.
func TestRedaction_ProviderQuotingTheKeyInEveryForm(t *testing.T) {
	t.Parallel()
	keys := map[string]string{
		// A data.go.kr "Encoding" key, configured as issued: sent encoded
		// once more, the provider decodes it to this, and quotes it decoded.
		"BUILDRISK_KEY_MOLIT": "Zq81kEYmolit%2BSecret%2F7f3a%3D%3DQ",
		"BUILDRISK_KEY_DART":  "3f9a1c27be04d5f68a9b0c1d2e3f4a5b6c7d8e9f",
	}
	logs := &apptest.SyncBuffer{}
	s := apptest.New(t, &apptest.Opts{Env: keys, Fake: fakeupstream.Config{Companies: 40}, Logs: logs})
	dir := t.TempDir()
	s.StartWorkerWith(s.Pool, func(_ *worker.Config, rc *batch.Config) { rc.Jobs[corpcode.Name] = corpcode.Job{Dir: dir} })
	s.RunJob(corpcode.Name, `{}`)

	s.Fake.SetConfig(fakeupstream.Config{Companies: 40, QuoteKeyForms: true})
	var ids []string
	for _, job := range []struct{ name, body string }{
		{corpcode.Name, `{}`},
		{filing.Name, `{"params":{"from":"2025-01-01","to":"2025-01-31"}}`},
		{apttrade.Name, apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01")},
	} {
		id := s.RequestJob(job.name, job.body)["requestId"].(string)
		s.WaitRequest(id, "DONE", "FAILED")
		ids = append(ids, id)
	}
	// corpCodeSync's archive names a company "Z" and the key, in an entry
	// its parser refuses: the error must not quote the name (cut to 40
	// bytes, it held 39 of the 40 characters of the DART key).
	s.Fake.SetConfig(fakeupstream.Config{Companies: 40, CorpNameQuotesKey: true})
	id := s.RequestJob(corpcode.Name, `{}`)["requestId"].(string)
	failed := s.WaitRequest(id, "FAILED")
	require.Contains(t, fmt.Sprint(failed), "is not 8 digits", "the archive's bad entry failed the run")
	ids = append(ids, id)

	var seen strings.Builder
	for _, span := range s.Spans.Ended() {
		writeSpan(&seen, span)
	}
	seen.WriteString(logs.String())
	for _, table := range []string{"job_request", "job_execution", "job_checkpoint", "job_instance", "river_job", "worker", "corp_code_download"} {
		var rows string
		require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(t::text, E'\n'), '') FROM `+table+` t`).Scan(&rows))
		seen.WriteString(rows)
	}
	for _, path := range append([]string{"/v1/jobs", "/v1/workers", "/v1/requests?limit=500"}, prefixed("/v1/requests/", ids)...) {
		seen.WriteString(s.Raw(path))
	}
	text := strings.ToLower(seen.String())
	require.Contains(t, text, `provider code \"010\" (unregistered key `, "DART's refusal was recorded")
	require.Contains(t, text, `provider code \"30\" (unregistered key `, "data.go.kr's refusal was recorded")
	for name, key := range keys {
		// The provider received the key as configured (the client encodes
		// it once for the query, the provider decodes it once).
		for _, form := range fakeupstream.QuotedKeyForms(key, "") {
			carried := strings.ToLower(form.Carried)
			for i := 0; i+keyRun <= len(carried); i++ {
				if j := strings.Index(text, carried[i:i+keyRun]); j >= 0 {
					t.Fatalf("%s leaked as %s: ...%s...", name, form.Name, text[max(j-200, 0):min(j+keyRun+40, len(text))])
				}
			}
		}
	}
}

// keyRun is the shortest run of a key's characters that counts as the key.
const keyRun = 12

func prefixed(prefix string, ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = prefix + id
	}
	return out
}

// writeSpan writes everything a span exporter would send.
func writeSpan(w io.Writer, span sdktrace.ReadOnlySpan) {
	fmt.Fprintln(w, span.Name(), span.Status().Description)
	for _, a := range span.Attributes() {
		fmt.Fprintln(w, a.Key, a.Value.String())
	}
	for _, e := range span.Events() {
		fmt.Fprintln(w, e.Name)
		for _, a := range e.Attributes {
			fmt.Fprintln(w, a.Key, a.Value.String())
		}
	}
	for _, l := range span.Links() {
		for _, a := range l.Attributes {
			fmt.Fprintln(w, a.Key, a.Value.String())
		}
	}
}

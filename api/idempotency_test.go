package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/internal/jobset"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/api"
	"github.com/buildrisk/radar/queries/testfactory"
)

// Two operators with named tokens (alice, bob) and a viewer: keys are per
// token name.
const (
	aliceToken = "alice-token-for-tests-0123456789abcdef"
	bobToken   = "bob-token-for-tests-0123456789abcdef00"
)

// idempotencyEnv gives the system named operator tokens.
var idempotencyEnv = map[string]string{
	"BUILDRISK_API_TOKENS": "operator:alice:" + aliceToken + ",operator:bob:" + bobToken + ",viewer:" + apptest.ViewerToken,
}

// answer is one HTTP answer of the api.
type answer struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// postKey POSTs body to path with token and, unless key is empty, an
// Idempotency-Key header.
func postKey(t *testing.T, s *apptest.System, token, path, key, body string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.API.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if len(raw) > 0 {
		require.NoError(t, json.Unmarshal(raw, &a.body), "%s", raw)
	}
	return a
}

// requireProblem requires a problem answer of status and type /problems/<kind>.
func requireProblem(t *testing.T, a answer, status int, kind string) {
	t.Helper()
	require.Equal(t, status, a.status, a.raw)
	require.Equal(t, "application/problem+json", a.header.Get("Content-Type"), a.raw)
	require.Equal(t, "/problems/"+kind, a.body["type"], a.raw)
}

// A client whose 202 was lost retries with the same Idempotency-Key: while
// the run is still the job's active request, and again after it ended, it
// gets the first answer again (the same requestId, marked replayed), not a
// 409 and not a second run. Nothing is inserted and the provider is called
// no more. The retry's body may be formatted differently: the key's
// fingerprint is of the canonical body.
func TestIdempotency_RetryAfterTheRunEndedAnswersTheSameRequest(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: idempotencyEnv})
	s.Gate.Arm(0) // the run's first provider call is held: the run stays active
	s.StartWorker()
	body := apptest.AptTradeBody([]string{"11110", "11140"}, "2025-01", "2025-02")
	reformatted := `{ "params": { "to": "2025-02", "from": "2025-01", "regions": ["11110", "11140"] } }`

	first := postKey(t, s, aliceToken, "/v1/jobs/aptTrade/requests", "retry-1", body)
	require.Equal(t, http.StatusAccepted, first.status, first.raw)
	require.Empty(t, first.header.Get("Idempotent-Replayed"), "a first answer is no replay")
	id := first.body["requestId"].(string)
	<-s.Gate.Blocked

	// Active: the retry is the first answer, not a 409 duplicate.
	again := postKey(t, s, aliceToken, "/v1/jobs/aptTrade/requests", "retry-1", reformatted)
	require.Equal(t, http.StatusAccepted, again.status, again.raw)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, first.body, again.body)
	dup := postKey(t, s, aliceToken, "/v1/jobs/aptTrade/requests", "", body)
	requireProblem(t, dup, http.StatusConflict, "duplicate-active-request")
	require.Equal(t, id, dup.body["activeRequestId"])

	s.Gate.Open()
	done := s.WaitRequest(id, "DONE", "FAILED")
	require.Equal(t, "DONE", done["status"], "%v", done)
	calls := s.Fake.Stats().Total
	require.Equal(t, int64(4), calls)
	rows := func() [3]int {
		return [3]int{s.Count("SELECT count(*) FROM job_request"), s.Count("SELECT count(*) FROM river_job"), s.Count("SELECT count(*) FROM job_execution")}
	}
	before := rows()
	require.Equal(t, [3]int{1, 1, 1}, before)

	// Ended: the retry is still the first answer, and starts nothing.
	for _, b := range []string{body, reformatted} {
		late := postKey(t, s, aliceToken, "/v1/jobs/aptTrade/requests", "retry-1", b)
		require.Equal(t, http.StatusAccepted, late.status, late.raw)
		require.Equal(t, "true", late.header.Get("Idempotent-Replayed"))
		require.Equal(t, first.body, late.body, "the same status and body, the same requestId")
	}
	quoted := postKey(t, s, aliceToken, "/v1/jobs/aptTrade/requests", `"retry-1"`, body)
	require.Equal(t, http.StatusAccepted, quoted.status, quoted.raw)
	require.Equal(t, id, quoted.body["requestId"], "a key sent as an RFC 8941 string is the same key")
	require.Equal(t, before, rows(), "no request, River job or execution was inserted")
	require.Equal(t, calls, s.Fake.Stats().Total, "no provider call was made")

	// A new key is a new request: the same params resume nothing (the run
	// completed) and start a second run.
	fresh := postKey(t, s, aliceToken, "/v1/jobs/aptTrade/requests", "retry-2", body)
	require.Equal(t, http.StatusAccepted, fresh.status, fresh.raw)
	require.NotEqual(t, id, fresh.body["requestId"])
}

// The same key with another request is refused 422 with its own type, and
// does nothing: another body, another job, another operation.
func TestIdempotency_ReusedKeyWithAnotherRequestIs422(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: idempotencyEnv})
	body := apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01")
	first := postKey(t, s, aliceToken, "/v1/jobs/aptTrade/requests", "k-422", body)
	require.Equal(t, http.StatusAccepted, first.status, first.raw)

	rules, ok := jobset.Catalog().Lookup("rules")
	require.True(t, ok)
	rulesBody, err := json.Marshal(map[string]any{"params": rules.Example()})
	require.NoError(t, err)
	for name, call := range map[string][2]string{
		"OtherBody":      {"/v1/jobs/aptTrade/requests", apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-02")},
		"MaxCallsAdded":  {"/v1/jobs/aptTrade/requests", `{"params":{"regions":["11110"],"from":"2025-01","to":"2025-01"},"maxCalls":5}`},
		"OtherJob":       {"/v1/jobs/rules/requests", string(rulesBody)},
		"OtherOperation": {"/v1/jobs/aptTrade/stop", ""},
	} {
		t.Run(name, func(t *testing.T) {
			a := postKey(t, s, aliceToken, call[0], "k-422", call[1])
			requireProblem(t, a, http.StatusUnprocessableEntity, "idempotency-key-reused")
			require.Contains(t, a.body["detail"], "k-422")
		})
	}
	require.Equal(t, 1, s.Count("SELECT count(*) FROM job_request"))
	require.Equal(t, 1, s.Count("SELECT count(*) FROM river_job"))
}

// N calls with one key at once: exactly one is the first answer (202, not
// replayed); each other one is either 409 idempotency-key-in-progress
// (the first was still being processed) or the first answer replayed. One
// request, one River job.
func TestIdempotency_ConcurrentCallsWithOneKey(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: idempotencyEnv})
	body := apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-03")
	const n = 20
	start := make(chan struct{})
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i] = postKey(t, s, aliceToken, "/v1/jobs/aptTrade/requests", "burst", body)
		})
	}
	close(start)
	wg.Wait()

	var firsts, replays, inProgress int
	var id any
	for _, a := range answers {
		switch {
		case a.status == http.StatusAccepted && a.header.Get("Idempotent-Replayed") == "":
			firsts++
			id = a.body["requestId"]
		case a.status == http.StatusAccepted:
			replays++
		default:
			requireProblem(t, a, http.StatusConflict, "idempotency-key-in-progress")
			inProgress++
		}
	}
	require.Equal(t, 1, firsts, "exactly one first answer")
	require.Equal(t, n, firsts+replays+inProgress)
	for _, a := range answers {
		if a.status == http.StatusAccepted {
			require.Equal(t, id, a.body["requestId"], "every replay is the first answer")
		}
	}
	require.Equal(t, 1, s.Count("SELECT count(*) FROM job_request"))
	require.Equal(t, 1, s.Count("SELECT count(*) FROM river_job"))
	t.Logf("%d calls: 1 first answer, %d replays, %d in progress", n, replays, inProgress)
}

// While the first call with a key is being processed (its transaction
// holds the key's lock; here the test's own transaction does), a second one
// is answered 409 idempotency-key-in-progress at once, and writes nothing;
// once the lock is released it goes through.
func TestIdempotency_InProgressIs409(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: idempotencyEnv})
	ctx := context.Background()
	body := apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01")
	tx, err := s.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('buildrisk.idempotency:' || $1 || ':' || $2, 0))`, "alice", "slow")
	require.NoError(t, err)
	a := postKey(t, s, aliceToken, "/v1/jobs/aptTrade/requests", "slow", body)
	requireProblem(t, a, http.StatusConflict, "idempotency-key-in-progress")
	require.Empty(t, a.body["activeRequestId"])
	require.Zero(t, s.Count("SELECT count(*) FROM job_request"))
	// Bob's key of the same name is another lock.
	b := postKey(t, s, bobToken, "/v1/jobs/aptTrade/requests", "slow", body)
	require.Equal(t, http.StatusAccepted, b.status, b.raw)
	require.NoError(t, tx.Rollback(ctx)) // the lock ends with the transaction

	c := postKey(t, s, aliceToken, "/v1/jobs/aptTrade/requests", "slow", body)
	requireProblem(t, c, http.StatusConflict, "duplicate-active-request") // bob's run is the job's active request
}

// One client's key never answers another's call: alice's and bob's same
// key are two keys.
func TestIdempotency_KeysArePerTokenName(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: idempotencyEnv})
	aptTrade := apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01")
	rules, ok := jobset.Catalog().Lookup("rules")
	require.True(t, ok)
	rulesBody, err := json.Marshal(map[string]any{"params": rules.Example()})
	require.NoError(t, err)

	alice := postKey(t, s, aliceToken, "/v1/jobs/aptTrade/requests", "shared", aptTrade)
	require.Equal(t, http.StatusAccepted, alice.status, alice.raw)
	// Bob's "shared" with another request: no 422, a request of his own.
	bob := postKey(t, s, bobToken, "/v1/jobs/rules/requests", "shared", string(rulesBody))
	require.Equal(t, http.StatusAccepted, bob.status, bob.raw)
	require.Empty(t, bob.header.Get("Idempotent-Replayed"))
	require.NotEqual(t, alice.body["requestId"], bob.body["requestId"])
	// Bob's "shared" with alice's very call: not her answer replayed, his
	// own 422 (his key is taken by his rules request).
	cross := postKey(t, s, bobToken, "/v1/jobs/aptTrade/requests", "shared", aptTrade)
	requireProblem(t, cross, http.StatusUnprocessableEntity, "idempotency-key-reused")

	for token, want := range map[string]answer{aliceToken: alice, bobToken: bob} {
		path, body := "/v1/jobs/aptTrade/requests", aptTrade
		if token == bobToken {
			path, body = "/v1/jobs/rules/requests", string(rulesBody)
		}
		again := postKey(t, s, token, path, "shared", body)
		require.Equal(t, http.StatusAccepted, again.status, again.raw)
		require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
		require.Equal(t, want.body, again.body)
	}
	require.Equal(t, 2, s.Count("SELECT count(*) FROM job_request"))
	require.Equal(t, 2, s.Count("SELECT count(*) FROM idempotency_key"))
	require.Equal(t, 1, s.Count("SELECT count(*) FROM idempotency_key WHERE token_name = 'alice'"))
}

// A key that is not 1 to 255 printable ASCII characters is a 400 naming
// the header, and nothing is written.
func TestIdempotency_BadKeyIs400NamingTheHeader(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: idempotencyEnv})
	body := apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01")
	for name, key := range map[string]string{
		"TooLong":        strings.Repeat("k", 256),
		"NotASCII":       "clé",
		"UnclosedQuote":  `"abc`,
		"EmptyQuoted":    `""`,
		"BadEscape":      `"a\b"`,
		"QuotedTooLong":  `"` + strings.Repeat("k", 256) + `"`,
		"UnescapedQuote": `"a"b"`,
		"Tab":            "a\tb",
	} {
		t.Run(name, func(t *testing.T) {
			a := postKey(t, s, aliceToken, "/v1/jobs/aptTrade/requests", key, body)
			requireProblem(t, a, http.StatusBadRequest, "invalid-params")
			errs, ok := a.body["errors"].([]any)
			require.True(t, ok, a.raw)
			require.Equal(t, "header.Idempotency-Key", errs[0].(map[string]any)["location"], a.raw)
			require.Contains(t, a.body["detail"], "Idempotency-Key")
		})
	}
	for _, path := range []string{"/v1/jobs/aptTrade/stop", "/v1/executions/1/abandon"} {
		a := postKey(t, s, aliceToken, path, strings.Repeat("k", 256), "")
		requireProblem(t, a, http.StatusBadRequest, "invalid-params")
	}
	require.Zero(t, s.Count("SELECT count(*) FROM job_request"))

	// 255 characters, spaces and punctuation included, are a key.
	key := strings.Repeat("k", 250) + ` ~!"\`
	a := postKey(t, s, aliceToken, "/v1/jobs/aptTrade/requests", key, body)
	require.Equal(t, http.StatusAccepted, a.status, a.raw)
}

// A stop and an abandon retried with their key are answered as the first
// time (202 STOPPING, 200 ABANDONED), where without the key the execution's
// new state answers 409; a call refused the first time records nothing, so
// its key stays free.
func TestIdempotency_StopAndAbandon(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: idempotencyEnv})
	ctx := context.Background()

	// Nothing running: 409, and the key is not spent.
	requireProblem(t, postKey(t, s, aliceToken, "/v1/jobs/aptTrade/stop", "stop-1", ""), http.StatusConflict, "nothing-running")
	_, execID := s.InsertRunning("1@idem#a", time.Now())
	stop := postKey(t, s, aliceToken, "/v1/jobs/aptTrade/stop", "stop-1", "")
	require.Equal(t, http.StatusAccepted, stop.status, stop.raw)
	require.Equal(t, map[string]any{"executionId": fmt.Sprint(execID), "status": "STOPPING"}, stop.body)
	again := postKey(t, s, aliceToken, "/v1/jobs/aptTrade/stop", "stop-1", "")
	require.Equal(t, http.StatusAccepted, again.status, again.raw)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, stop.body, again.body)
	requireProblem(t, postKey(t, s, aliceToken, "/v1/jobs/aptTrade/stop", "", ""), http.StatusConflict, "nothing-running")

	abandon := fmt.Sprintf("/v1/executions/%d/abandon", execID)
	requireProblem(t, postKey(t, s, aliceToken, abandon, "abandon-1", ""), http.StatusConflict, "worker-alive")
	testfactory.WorkerHeartbeatAge(ctx, t, s.Pool, "1@idem#a", time.Hour)
	first := postKey(t, s, aliceToken, abandon, "abandon-1", "")
	require.Equal(t, http.StatusOK, first.status, first.raw)
	replay := postKey(t, s, aliceToken, abandon, "abandon-1", "")
	require.Equal(t, http.StatusOK, replay.status, replay.raw)
	require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
	require.Equal(t, first.body, replay.body)
	requireProblem(t, postKey(t, s, aliceToken, abandon, "", ""), http.StatusConflict, "execution-not-active")
	requireProblem(t, postKey(t, s, aliceToken, "/v1/executions/999999/abandon", "abandon-1", ""), http.StatusUnprocessableEntity, "idempotency-key-reused")

	var n int
	require.NoError(t, s.APIPool.QueryRow(ctx, `SELECT count(*) FROM audit_event WHERE action IN ('stop', 'abandon')`).Scan(&n)) // the api's alone to read
	require.Equal(t, 2, n, "a replay is not audited as a second stop or abandon")
}

// A key past its retention is free again: the same key with another
// request is a new call.
func TestIdempotency_ExpiredKeyIsFree(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: idempotencyEnv})
	ctx := context.Background()
	first := postKey(t, s, aliceToken, "/v1/jobs/aptTrade/requests", "old", apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	require.Equal(t, http.StatusAccepted, first.status, first.raw)
	require.Equal(t, 24*60*60, s.Count(`SELECT extract(epoch FROM expires_at - created_at)::int FROM idempotency_key`), "BUILDRISK_IDEMPOTENCY_RETENTION's default")

	owner, err := pgx.Connect(ctx, s.OwnerURL)
	require.NoError(t, err)
	defer owner.Close(ctx)
	testfactory.ExpireIdempotencyKeys(ctx, t, owner)
	rules, ok := jobset.Catalog().Lookup("rules")
	require.True(t, ok)
	rulesBody, err := json.Marshal(map[string]any{"params": rules.Example()})
	require.NoError(t, err)
	again := postKey(t, s, aliceToken, "/v1/jobs/rules/requests", "old", string(rulesBody))
	require.Equal(t, http.StatusAccepted, again.status, again.raw)
	require.Empty(t, again.header.Get("Idempotent-Replayed"))
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM idempotency_key WHERE operation = 'POST /v1/jobs/rules/requests' AND expires_at > now()`))
}

// A key of IdempotencyKeyMaxLength characters reused for another request
// is quoted back in the 422's detail in at most 40 bytes (jobs.Quote).
func TestIdempotency_LongKeyIsQuotedBounded(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: idempotencyEnv})
	key := "k" + strings.Repeat("0123456789", api.IdempotencyKeyMaxLength/10+1)[:api.IdempotencyKeyMaxLength-1]
	first := postKey(t, s, aliceToken, "/v1/jobs/aptTrade/requests", key, apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-01"))
	require.Equal(t, http.StatusAccepted, first.status, first.raw)
	again := postKey(t, s, aliceToken, "/v1/jobs/aptTrade/requests", key, apptest.AptTradeBody([]string{"11110"}, "2025-01", "2025-02"))
	requireProblem(t, again, http.StatusUnprocessableEntity, "idempotency-key-reused")
	require.Contains(t, again.body["detail"], key[:20])
	require.NotContains(t, again.raw, key[:41])
	require.Contains(t, again.body["detail"], "(255 bytes)")
}

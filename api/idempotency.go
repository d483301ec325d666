package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/request"
)

// Idempotency-Key, after the IETF httpapi draft "The Idempotency-Key HTTP
// Header Field" (-09). The POSTs that start or change work (a request, a
// stop, an abandon) take an optional key. The first call with a key records
// it, per token name, with a fingerprint of the call (its operation and
// canonical body) and its answer, in the transaction that does the call's
// work: the key is recorded exactly when the work committed. Within the
// retention window (BUILDRISK_IDEMPOTENCY_RETENTION):
//   - the same key and the same call is answered with the recorded status
//     and body again, marked Idempotent-Replayed: true, and starts nothing
//     (even after the run ended: no second run, no provider call);
//   - the same key with another call is refused 422 idempotency-key-reused;
//   - the same key while the first call is still being processed (its
//     transaction holds the key's advisory lock) is refused 409
//     idempotency-key-in-progress.
//
// A call that fails records nothing (its transaction rolls back), so the
// client may retry it with the same key. Keys of different token names
// never meet: a key is one client's.
const (
	// IdempotencyKeyHeader is the request header that carries the key.
	IdempotencyKeyHeader = "Idempotency-Key"
	// IdempotentReplayedHeader marks an answer replayed from a key's
	// record ("true"); a first answer does not carry it.
	IdempotentReplayedHeader = "Idempotent-Replayed"
	// IdempotencyKeyMaxLength is the longest key accepted, in characters.
	IdempotencyKeyMaxLength = 255
	// IdempotencyRetentionDefault is Config.IdempotencyRetention's default.
	IdempotencyRetentionDefault = 24 * time.Hour
)

// IdempotencyKeyInput is the Idempotency-Key of an operation's input,
// embedded in it (exported: Huma reads only exported embedded fields).
type IdempotencyKeyInput struct {
	IdempotencyKey string `header:"Idempotency-Key" doc:"Optional (IETF httpapi Idempotency-Key draft -09): 1 to 255 printable ASCII characters, as an RFC 8941 string (\"...\") or bare. A retry with the same key and body within BUILDRISK_IDEMPOTENCY_RETENTION (24 h by default) is answered with the first answer again (Idempotent-Replayed: true) and starts nothing; the same key with another body is a 422, and while the first call is still being processed a 409. Keys are per token name. A call that fails records nothing."`
	// sent counts the Idempotency-Key headers of the call, so that an
	// empty one is refused rather than taken for none.
	sent int
}

// Resolve implements huma.Resolver: it counts the call's Idempotency-Key
// headers.
func (in *IdempotencyKeyInput) Resolve(ctx huma.Context) []error {
	ctx.EachHeader(func(name, _ string) {
		if strings.EqualFold(name, IdempotencyKeyHeader) {
			in.sent++
		}
	})
	return nil
}

// ReplayedOutput, embedded in an operation's output, marks a replayed
// answer.
type ReplayedOutput struct {
	Replayed string `header:"Idempotent-Replayed" doc:"\"true\" when this is the recorded answer of an earlier call with the same Idempotency-Key (nothing was started again); absent otherwise"`
}

// takesIdempotencyKey reports whether op documents the Idempotency-Key
// header.
func takesIdempotencyKey(op *huma.Operation) bool {
	for _, p := range op.Parameters {
		if p.In == "header" && strings.EqualFold(p.Name, IdempotencyKeyHeader) {
			return true
		}
	}
	return false
}

// parseIdempotencyKey returns the key of an Idempotency-Key value: an RFC
// 8941 sf-string, the draft's form ("abc", with \" and \\ escapes), or the
// bare key most clients send. The key is 1 to IdempotencyKeyMaxLength
// printable ASCII characters (space to tilde).
func parseIdempotencyKey(v string) (string, error) {
	key := v
	if strings.HasPrefix(v, `"`) {
		if len(v) < 2 || !strings.HasSuffix(v, `"`) {
			return "", errors.New("a quoted key must end with a double quote")
		}
		var b strings.Builder
		inner := v[1 : len(v)-1]
		for i := 0; i < len(inner); i++ {
			c := inner[i]
			switch {
			case c == '\\':
				if i+1 == len(inner) || (inner[i+1] != '"' && inner[i+1] != '\\') {
					return "", errors.New(`in a quoted key a backslash escapes only " or \`)
				}
				i++
				b.WriteByte(inner[i])
			case c == '"':
				return "", errors.New(`a double quote inside a quoted key must be escaped as \"`)
			default:
				b.WriteByte(c)
			}
		}
		key = b.String()
	}
	if key == "" || len(key) > IdempotencyKeyMaxLength {
		return "", fmt.Errorf("must be 1 to %d characters (this one has %d)", IdempotencyKeyMaxLength, len(key))
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return "", fmt.Errorf("must be printable ASCII (space to ~); character %d is not", i+1)
		}
	}
	return key, nil
}

// idempotent is one call's Idempotency-Key: whose (the token's name), the
// key, and the call it stands for.
type idempotent struct {
	s           *Server
	tokenName   string
	key         string
	operation   string
	fingerprint []byte
}

// idempotency returns the key of a call to operation (its method and path,
// e.g. "POST /v1/jobs/aptTrade/stop") with body, or nil when the call sent
// none: 400 naming the header for a bad key.
func (s *Server) idempotency(ctx context.Context, in *IdempotencyKeyInput, operation string, body []byte) (*idempotent, error) {
	if in.sent == 0 {
		return nil, nil
	}
	if in.sent > 1 {
		return nil, badHeader(IdempotencyKeyHeader, "give one key, not several")
	}
	key, err := parseIdempotencyKey(in.IdempotencyKey)
	if err != nil {
		return nil, badHeader(IdempotencyKeyHeader, err.Error())
	}
	sum := sha256.New()
	sum.Write([]byte(operation))
	sum.Write([]byte{'\n'})
	sum.Write(canonicalJSON(body))
	return &idempotent{s: s, tokenName: callerName(ctx), key: key, operation: operation, fingerprint: sum.Sum(nil)}, nil
}

// canonicalJSON is body with the same meaning written the same way (no
// insignificant space, object members sorted, numbers as sent), so that a
// retry's fingerprint does not depend on how its client formats JSON. A
// body that is not JSON is taken as it is (the call refuses it anyway).
func canonicalJSON(body []byte) []byte {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return trimmed
	}
	canonical, err := json.Marshal(v)
	if err != nil {
		return trimmed
	}
	return canonical
}

// replayError carries a key's recorded answer out of the transaction that
// found it: the call is answered with it and does nothing.
type replayError struct {
	status   int
	response []byte
}

func (e *replayError) Error() string { return "answered from the idempotency key's record" }

// lookup answers the call from the key's record, if any: a *replayError
// for the same call, a 422 for another, nil when the key has no record.
func (k *idempotent) lookup(ctx context.Context, db queries.DBTX) error {
	row, err := k.s.queries.IdempotencyKeyGet(ctx, db, &queries.IdempotencyKeyGetParams{TokenName: k.tokenName, Key: k.key})
	if err := queries.Interpret(err); errors.Is(err, queries.ErrNotFound) {
		return nil
	} else if err != nil {
		return fmt.Errorf("error reading idempotency key: %w", err)
	}
	if !bytes.Equal(row.Fingerprint, k.fingerprint) {
		return newProblem(ProblemIdempotencyKeyReused, fmt.Sprintf("Idempotency-Key %s was used for another request (%s, or another body) within %s; use a new key for a new request",
			catalog.Quote(k.key), row.Operation, k.s.cfg.IdempotencyRetention), &huma.ErrorDetail{Location: "header." + IdempotencyKeyHeader, Message: "used for another request"})
	}
	return &replayError{status: int(row.Status), response: row.Response}
}

// begin runs first in the call's transaction: it takes the key's advisory
// lock, without waiting (409 idempotency-key-in-progress while another
// transaction holds it), and then looks the key up under the lock (see
// lookup): a call with the key that committed before is found.
func (k *idempotent) begin(ctx context.Context, tx pgx.Tx) error {
	locked, err := k.s.queries.IdempotencyKeyTryLock(ctx, tx, &queries.IdempotencyKeyTryLockParams{TokenName: k.tokenName, Key: k.key})
	if err != nil {
		return fmt.Errorf("error locking idempotency key: %w", err)
	}
	if !locked {
		return newConflict(ProblemIdempotencyKeyInProgress, fmt.Sprintf("a call with Idempotency-Key %s is still being processed; retry shortly to get its answer", catalog.Quote(k.key)), 0)
	}
	return k.lookup(ctx, tx)
}

// record writes the key with the call's answer (status and body) in the
// call's transaction, under the lock begin took.
func (k *idempotent) record(ctx context.Context, tx pgx.Tx, status int, body any) error {
	response, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("error encoding the answer of idempotency key: %w", err)
	}
	n, err := k.s.queries.IdempotencyKeyRecord(ctx, tx, &queries.IdempotencyKeyRecordParams{
		TokenName: k.tokenName, Key: k.key, Fingerprint: k.fingerprint, Operation: k.operation,
		Status: int16(status), Response: response, RetentionSeconds: k.s.cfg.IdempotencyRetention.Seconds(),
	})
	if err != nil {
		return fmt.Errorf("error recording idempotency key: %w", err)
	}
	if n == 0 {
		// begin found no kept record under the key's lock: none can exist.
		return fmt.Errorf("idempotency key %s of %s is already recorded", catalog.Quote(k.key), k.tokenName)
	}
	return nil
}

// replayed decodes a key's recorded answer into out's body (a pointer).
func replayed(replay *replayError, out any) error {
	if err := json.Unmarshal(replay.response, out); err != nil {
		return fmt.Errorf("error decoding the recorded answer of an idempotency key: %w", err)
	}
	return nil
}

// enqueueGuard records a request's key in the enqueue's transaction
// (request.Guard): begin before the job's lock and duplicate check, so a
// retry is answered from the record even while its run is the job's active
// request, and record once the request is inserted.
type enqueueGuard struct {
	key  *idempotent
	body func(*request.EnqueueResult) any
}

func (g *enqueueGuard) Before(ctx context.Context, tx pgx.Tx) error { return g.key.begin(ctx, tx) }

func (g *enqueueGuard) After(ctx context.Context, tx pgx.Tx, res *request.EnqueueResult) error {
	return g.key.record(ctx, tx, http.StatusAccepted, g.body(res))
}

// badHeader is the 400 of a bad request header, named like every other bad
// input (header.Idempotency-Key).
func badHeader(name, msg string) error {
	return badInput("header", name, "header."+name, msg)
}

-- name: IdempotencyKeyTryLock :one
-- IdempotencyKeyTryLock takes, without waiting, the transaction's advisory
-- lock on one token name's key: false while another transaction holds it,
-- that is while the first call with this key is still being processed (its
-- retry is then answered 409). Token names hold no ':', so the lock's name
-- is unambiguous.
SELECT pg_try_advisory_xact_lock(hashtextextended('buildrisk.idempotency:' || @token_name::text || ':' || @key::text, 0))::boolean AS locked;

-- name: IdempotencyKeyGet :one
-- IdempotencyKeyGet returns the recorded call of a token name's key while
-- it is kept (an expired row is as good as gone, whether or not a reap pass
-- deleted it yet).
SELECT fingerprint, operation, status, response
FROM idempotency_key
WHERE token_name = @token_name AND key = @key AND expires_at > now();

-- name: IdempotencyKeyRecord :execrows
-- IdempotencyKeyRecord records a call's key with its answer, kept for
-- retention_seconds. An expired row of the same key is overwritten; a kept
-- one is not (0 rows: the caller checked under the key's lock that there is
-- none).
INSERT INTO idempotency_key (token_name, key, fingerprint, operation, status, response, expires_at)
VALUES (@token_name, @key, @fingerprint, @operation, @status, @response, now() + make_interval(secs => @retention_seconds::float8))
ON CONFLICT (token_name, key) DO UPDATE
SET fingerprint = excluded.fingerprint, operation = excluded.operation, status = excluded.status,
    response = excluded.response, created_at = excluded.created_at, expires_at = excluded.expires_at
WHERE idempotency_key.expires_at <= now();

-- name: IdempotencyKeyDeleteExpired :execrows
-- IdempotencyKeyDeleteExpired forgets the keys past their retention.
DELETE FROM idempotency_key WHERE expires_at <= now();

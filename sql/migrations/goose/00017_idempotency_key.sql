-- +goose Up
-- +goose ENVSUB ON

-- The Idempotency-Key of a POST (the IETF httpapi draft): per token name
-- and key, the request the call was (a hash of its operation and canonical
-- body) and the answer it got, kept until expires_at
-- (BUILDRISK_IDEMPOTENCY_RETENTION after the call). The row is written in
-- the transaction that does the call's work (the request's insert and its
-- River job, a stop, an abandon), so a key is recorded exactly when its
-- work committed; a retry with the same key and body is answered from
-- response, and starts nothing. Keys are scoped by token_name: one client's
-- key never answers another's call.
CREATE TABLE idempotency_key (
    token_name  text        NOT NULL,
    key         text        NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    -- SHA-256 of the operation (its id and path parameters) and the
    -- canonical JSON body: the same key with another request is refused.
    fingerprint bytea       NOT NULL,
    operation   text        NOT NULL,
    status      smallint    NOT NULL,
    response    jsonb       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (token_name, key)
);
-- The reap pass of every worker deletes the expired rows down this index.
CREATE INDEX idempotency_key_expires_at_idx ON idempotency_key (expires_at);

-- The api records keys (an expired key's row is overwritten in place, so
-- UPDATE too); the workers only delete expired ones. Neither may truncate.
GRANT SELECT, INSERT, UPDATE ON idempotency_key TO "${BUILDRISK_DB_API_ROLE:-radar_app_api}";
REVOKE ALL ON idempotency_key FROM "${BUILDRISK_DB_APP_ROLE:-radar_app}";
GRANT SELECT, DELETE ON idempotency_key TO "${BUILDRISK_DB_APP_ROLE:-radar_app}";

-- +goose Down
DROP TABLE idempotency_key;

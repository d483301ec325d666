-- +goose Up

-- Console sessions, so that logout ends one on the server. The cookie stays
-- signed (see api/session.go); a session is valid only while its row here
-- is unrevoked and unexpired. id_hash is the SHA-256 of the cookie's random
-- session id: a dump of this table holds no usable session.
CREATE TABLE console_session (
    id_hash    text PRIMARY KEY,
    role       text NOT NULL CHECK (role IN ('viewer', 'operator')),
    token_name text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    revoked_at timestamptz
);
CREATE INDEX console_session_expires_at ON console_session (expires_at);

-- The audit trail: who (the token's name), when, from where (the client's
-- address) and what. The api may only append to it and read it (00006).
CREATE TABLE audit_event (
    id     bigserial   PRIMARY KEY,
    at     timestamptz NOT NULL DEFAULT now(),
    actor  text        NOT NULL,
    client text        NOT NULL,
    action text        NOT NULL,
    target text        NOT NULL DEFAULT '',
    detail text        NOT NULL DEFAULT ''
);

-- +goose Down
DROP TABLE audit_event;
DROP TABLE console_session;

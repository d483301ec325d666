-- River's leader table (owned and migrated by rivermigrate), as far as the
-- scheduler reads it. Only read by sqlc, never applied.
CREATE TABLE river_leader (
    elected_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    leader_id  text        NOT NULL,
    name       text        PRIMARY KEY DEFAULT 'default'
);

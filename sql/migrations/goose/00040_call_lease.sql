-- +goose Up
-- provider_call_lease holds the blocks of a provider's daily cap that
-- workers have taken to spend in memory, so that a call costs no round trip
-- to the shared provider_call_budget row. provider_call_budget.calls_used
-- counts every open lease's granted calls plus what closed leases spent, so
-- it never exceeds the cap. A holder marks calls as claimed (in steps, on its
-- own row) before it makes them; when a holder dies, its lease expires and
-- the calls it never claimed go back to the day's budget, while the claimed
-- ones stay spent: they may have been made.
CREATE TABLE provider_call_lease (
    id         bigserial   PRIMARY KEY,
    provider   text        NOT NULL,
    day        date        NOT NULL,
    holder     text        NOT NULL,
    granted    integer     NOT NULL CHECK (granted > 0),
    claimed    integer     NOT NULL DEFAULT 0 CHECK (claimed >= 0 AND claimed <= granted),
    taken_at   timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

CREATE INDEX provider_call_lease_budget_idx ON provider_call_lease (provider, day, expires_at);

-- +goose Down
DROP TABLE provider_call_lease;

-- +goose Up

-- The providers' shared limits: the daily call caps, the leases workers
-- spend them through, and the fleet's shared send rate.

-- provider_call_budget holds the daily call caps shared by every worker.
CREATE TABLE provider_call_budget (
    provider   text    NOT NULL,
    day        date    NOT NULL,
    calls_used integer NOT NULL DEFAULT 0,
    PRIMARY KEY (provider, day)
);

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

-- provider_rate is the fleet's shared schedule of calls to one provider when
-- BUILDRISK_RATE_<P> is set: tat is the "theoretical arrival time" of the
-- generic cell rate algorithm, the moment the next unreserved send slot
-- begins, on the database's clock. A worker reserves a block of k slots in
-- one statement (tat = greatest(tat, now()) + k / rate) and hands them out in
-- memory, so a call costs no round trip; a provider's Retry-After pushes tat
-- forward, which makes every worker's next block wait. No row exists for a
-- provider without a rate.
CREATE TABLE provider_rate (
    provider text        PRIMARY KEY,
    tat      timestamptz NOT NULL
);

-- +goose Down
DROP TABLE provider_rate;
DROP TABLE provider_call_lease;
DROP TABLE provider_call_budget;

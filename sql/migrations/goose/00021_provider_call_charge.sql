-- +goose Up
-- provider_call_charge records, per lease a worker closed, the calls it
-- spent, in the transaction that closed it (ProviderCallLeaseReturn). After
-- a failover to an asynchronous replica, a worker re-asserts the leases it
-- took or closed in the window the replica lost (upstream's ledger): a
-- lease it closed with neither its row nor its charge on the new primary
-- had its grant lost, and its spent calls are charged to the day's budget
-- again, so provider_call_budget never falls below the calls made. Rows
-- older than a week are deleted as their holder closes new leases.
CREATE TABLE provider_call_charge (
    lease_id   bigint      PRIMARY KEY,
    holder     text        NOT NULL,
    provider   text        NOT NULL,
    day        date        NOT NULL,
    spent      integer     NOT NULL CHECK (spent >= 0),
    charged_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX provider_call_charge_holder_day_idx ON provider_call_charge (holder, day);

-- +goose Down
DROP TABLE provider_call_charge;

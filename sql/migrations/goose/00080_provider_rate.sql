-- +goose Up
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

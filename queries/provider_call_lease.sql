-- name: ProviderCallLeaseInsert :one
-- ProviderCallLeaseInsert records a lease of granted calls for holder; it
-- runs in the transaction that added them to provider_call_budget.
INSERT INTO provider_call_lease (provider, day, holder, granted, claimed, expires_at)
VALUES (@provider, @day, @holder, @granted::integer, @claimed::integer, now() + make_interval(secs => @ttl_seconds::float8))
RETURNING id;

-- name: ProviderCallLeaseExpire :one
-- ProviderCallLeaseExpire deletes the provider's expired leases of the day
-- (their holders died or stopped renewing) and returns the calls they never
-- claimed: those go back to the day's budget. Claimed calls stay spent.
-- A lease its holder is returning at this moment is locked and skipped (the
-- return gives its calls back), so a return and a sweep never deadlock.
WITH expired AS (
    DELETE FROM provider_call_lease
    WHERE id IN (
        SELECT l.id FROM provider_call_lease l
        WHERE l.provider = @provider AND l.day = @day AND l.expires_at < now()
        FOR UPDATE SKIP LOCKED
    )
    RETURNING granted - claimed AS unclaimed
)
SELECT coalesce(sum(unclaimed), 0)::integer AS unclaimed FROM expired;

-- name: ProviderCallLeaseCountOpen :one
-- ProviderCallLeaseCountOpen counts the provider's unexpired leases of the
-- day other than except_id: calls they have not spent may still come back.
SELECT count(*)::integer AS open_leases FROM provider_call_lease
WHERE provider = @provider AND day = @day AND expires_at >= now() AND id <> @except_id::bigint;

-- name: ProviderCallLeaseClaim :execrows
-- ProviderCallLeaseClaim marks calls of an unexpired lease as claimed (about
-- to be made) and renews it. No row means the lease expired: its unclaimed
-- calls went back to the budget, and the holder must take a new lease. Only
-- its holder claims a lease: after a failover to an asynchronous replica
-- that lost the lease, its id can be drawn again for another holder's.
UPDATE provider_call_lease
SET claimed = @claimed::integer, expires_at = now() + make_interval(secs => @ttl_seconds::float8)
WHERE id = @id AND holder = @holder AND expires_at >= now() AND @claimed::integer <= granted;

-- name: ProviderCallLeaseReturn :one
-- ProviderCallLeaseReturn closes a lease of which spent calls were made and
-- gives the rest back to the day's budget, recording the charge
-- (provider_call_charge; the holder's charges older than a week go). No
-- row means the lease had expired (its unclaimed calls are already back;
-- spent ≤ claimed), or is another holder's (see ProviderCallLeaseClaim).
WITH returned AS (
    DELETE FROM provider_call_lease l
    WHERE l.id = @id AND l.holder = @holder
    RETURNING l.id, l.holder, l.provider, l.day, l.granted
), charged AS (
    INSERT INTO provider_call_charge (lease_id, holder, provider, day, spent)
    SELECT r.id, r.holder, r.provider, r.day, @spent::integer FROM returned r
    ON CONFLICT (lease_id) DO NOTHING
), pruned AS (
    DELETE FROM provider_call_charge c
    USING returned r
    WHERE c.holder = r.holder AND c.day < r.day - 7
)
UPDATE provider_call_budget b
SET calls_used = b.calls_used - (r.granted - @spent::integer)
FROM returned r
WHERE b.provider = r.provider AND b.day = r.day
RETURNING b.calls_used;

-- name: ProviderCallLedgerState :many
-- ProviderCallLedgerState tells, for each lease id a holder took, whether
-- the database still has the lease (open, the holder's) and whether it has
-- the charge of its closing: what a worker re-asserts after a failover
-- (upstream's ledger) is what both lack.
SELECT i.id::bigint AS id,
       EXISTS (SELECT 1 FROM provider_call_lease l WHERE l.id = i.id AND l.holder = @holder)::boolean AS lease_open,
       EXISTS (SELECT 1 FROM provider_call_charge c WHERE c.lease_id = i.id)::boolean AS charged
FROM unnest(@ids::bigint[]) AS i(id);

-- name: ProviderCallLeaseReinsert :execrows
-- ProviderCallLeaseReinsert puts back a lease its holder still holds whose
-- row a failover lost, under its own id (never drawn again: the id fence
-- of migration 00020); it runs in the transaction that charges its grant
-- to the day's budget again. No row: the id names another lease.
INSERT INTO provider_call_lease (id, provider, day, holder, granted, claimed, expires_at)
VALUES (@id, @provider, @day, @holder, @granted::integer, @claimed::integer, now() + make_interval(secs => @ttl_seconds::float8))
ON CONFLICT (id) DO NOTHING;

-- name: ProviderCallChargeInsert :execrows
-- ProviderCallChargeInsert records the charge of a closed lease whose grant
-- a failover lost; it runs in the transaction that charges its spent calls
-- to the day's budget again. No row: already charged.
INSERT INTO provider_call_charge (lease_id, holder, provider, day, spent)
VALUES (@lease_id, @holder, @provider, @day, @spent::integer)
ON CONFLICT (lease_id) DO NOTHING;

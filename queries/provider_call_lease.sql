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
-- gives the rest back to the day's budget. No row means the lease had
-- expired (its unclaimed calls are already back; spent ≤ claimed), or is
-- another holder's (see ProviderCallLeaseClaim).
WITH returned AS (
    DELETE FROM provider_call_lease
    WHERE id = @id AND holder = @holder
    RETURNING provider, day, granted
)
UPDATE provider_call_budget b
SET calls_used = b.calls_used - (r.granted - @spent::integer)
FROM returned r
WHERE b.provider = r.provider AND b.day = r.day
RETURNING b.calls_used;

-- name: ProviderCallBudgetLock :one
-- ProviderCallBudgetLock creates the provider's row of the day if needed,
-- locks it until the transaction ends and returns calls_used: taking a lease
-- is decided under this lock, so every worker shares the same cap.
INSERT INTO provider_call_budget AS b (provider, day, calls_used)
VALUES (@provider, @day, 0)
ON CONFLICT (provider, day) DO UPDATE SET calls_used = b.calls_used
RETURNING calls_used;

-- name: ProviderCallBudgetSet :exec
UPDATE provider_call_budget SET calls_used = @calls_used::integer WHERE provider = @provider AND day = @day;

-- name: ProviderCallBudgetGet :one
-- ProviderCallBudgetGet returns the calls of the day that are spent or may
-- have been made: calls_used less what open leases have not claimed yet.
SELECT (b.calls_used - coalesce((
    SELECT sum(l.granted - l.claimed) FROM provider_call_lease l WHERE l.provider = b.provider AND l.day = b.day
), 0))::integer AS calls_used
FROM provider_call_budget b
WHERE b.provider = @provider AND b.day = @day;

-- name: ProviderCallBudgetAdd :exec
-- ProviderCallBudgetAdd charges calls to the provider's budget of the day
-- (re-asserted after a failover lost their charge), creating the row if
-- needed. It may take calls_used past the cap: the calls were made.
INSERT INTO provider_call_budget AS b (provider, day, calls_used)
VALUES (@provider, @day, @calls::integer)
ON CONFLICT (provider, day) DO UPDATE SET calls_used = b.calls_used + excluded.calls_used;

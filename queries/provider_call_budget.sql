-- name: ProviderCallBudgetTake :one
-- ProviderCallBudgetTake spends one call of the provider's daily cap. It
-- returns no row when the cap is already reached: the refusal is decided by
-- the database, so every worker shares the same cap.
INSERT INTO provider_call_budget (provider, day, calls_used)
VALUES (@provider, @day, 1)
ON CONFLICT (provider, day) DO UPDATE
SET calls_used = provider_call_budget.calls_used + 1
WHERE provider_call_budget.calls_used < @daily_cap::integer
RETURNING calls_used;

-- name: ProviderCallBudgetGet :one
SELECT calls_used FROM provider_call_budget WHERE provider = @provider AND day = @day;

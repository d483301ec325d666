-- name: DatabaseNow :one
-- DatabaseNow returns the database's clock (the time of the call, not of
-- its transaction's start): the one clock of every budget day.
SELECT clock_timestamp()::timestamptz AS now;

-- +goose Up
-- not_before is the earliest time a request may start, by the database's
-- clock (an automatic resume's backoff). The request's River job is
-- inserted available and its worker snoozes it (for less than River's
-- scheduler interval, so it stays available) until not_before has passed:
-- no River leader is on the path of a resume.
ALTER TABLE job_request ADD COLUMN not_before timestamptz;

-- +goose Down
ALTER TABLE job_request DROP COLUMN not_before;

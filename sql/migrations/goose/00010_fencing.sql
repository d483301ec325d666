-- +goose Up

-- Fencing. An execution is owned by one worker under one lease epoch: every
-- execution of an instance takes the instance's next epoch when it starts
-- (a resume included), and every write a run makes is conditional on its
-- execution still being active under that worker and epoch, and on the
-- instance's epoch still being that one. A run whose execution was
-- abandoned, or whose instance a newer execution took over, writes nothing.
ALTER TABLE job_instance ADD COLUMN lease_epoch bigint NOT NULL DEFAULT 0;
ALTER TABLE job_execution ADD COLUMN lease_epoch bigint NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE job_execution DROP COLUMN lease_epoch;
ALTER TABLE job_instance DROP COLUMN lease_epoch;

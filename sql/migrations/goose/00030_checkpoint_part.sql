-- +goose Up

-- job_checkpoint_part records items of a chunk that committed before the
-- chunk itself: a fan-out chunk commits each finished item's result, in
-- groups of whatever finished together, as it goes and when it ends early
-- (drain, stop, daily cap, maxCalls, failure), so that what was paid for is
-- kept. A resume processes only the items no part lists. The chunk's own
-- checkpoint, when it commits, counts only the items not in a part; the
-- instance's totals add both (each item is written once, in one of them).
CREATE TABLE job_checkpoint_part (
    id           bigserial   PRIMARY KEY,
    instance_id  bigint      NOT NULL REFERENCES job_instance (id),
    chunk        text        NOT NULL,
    execution_id bigint      NOT NULL REFERENCES job_execution (id),
    items        text[]      NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_checkpoint_part_instance_idx ON job_checkpoint_part (instance_id);

-- +goose Down
DROP TABLE job_checkpoint_part;

-- +goose Up

-- credit_eval_plan holds a creditEval execution's plan: each chunk's targets
-- as the exposure ledger had them when the execution planned, so the worker
-- never holds the whole target list (its memory stays flat in the ledger's
-- size) and a chunk's targets never drift from the declared total when the
-- ledger changes during the run. One row per chunk (CreditEvalChunkSize
-- codes). Only one creditEval execution runs at a time, so the next plan
-- deletes every other execution's rows.
CREATE TABLE credit_eval_plan (
    execution_id bigint NOT NULL,
    chunk        text   NOT NULL,
    corp_codes   text[] NOT NULL,
    PRIMARY KEY (execution_id, chunk)
);

-- +goose Down
DROP TABLE credit_eval_plan;

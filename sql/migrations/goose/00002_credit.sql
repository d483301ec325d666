-- +goose Up

-- exposure is the ledger of what each company still owes: creditEval's
-- targets are the companies with outstanding_krw > 0. Loaded by
-- `radar import exposure FILE.csv` (and seeded by `radar dev`).
CREATE TABLE exposure (
    corp_code       text PRIMARY KEY CHECK (corp_code ~ '^[0-9]{8}$'),
    outstanding_krw bigint NOT NULL CHECK (outstanding_krw >= 0),
    updated_at      timestamptz
);

-- credit_grade holds one grade per company and evaluation day: creditEval
-- upserts on (corp_code, eval_date), so a company is written exactly once a
-- day however often the job is resumed. source says which CREDIT endpoint
-- answered: the lookup, or the fallback crawl when the lookup was empty.
CREATE TABLE credit_grade (
    corp_code    text,
    eval_date    date,
    grade        text        NOT NULL,
    outlook      text,
    source       text        NOT NULL CHECK (source IN ('lookup', 'fallback')),
    execution_id bigint      NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (corp_code, eval_date)
);
-- The two-way count: the rows an instance's executions wrote.
CREATE INDEX credit_grade_execution_id_idx ON credit_grade (execution_id);

-- +goose Down
DROP TABLE credit_grade;
DROP TABLE exposure;

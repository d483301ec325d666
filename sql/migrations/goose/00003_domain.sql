-- +goose Up

-- The radar's domain tables: what the jobs fetch and compute, each row
-- stamped with the execution that wrote it.

-- apt_trade is one apartment trade (aptTrade).
CREATE TABLE apt_trade (
    region          text        NOT NULL,
    deal_ym         text        NOT NULL,
    serial          text        NOT NULL,
    apt_name        text        NOT NULL,
    dong            text        NOT NULL DEFAULT '',
    deal_date       date        NOT NULL,
    deal_amount_krw bigint      NOT NULL,
    area_m2         numeric(10, 2) NOT NULL,
    floor           integer     NOT NULL DEFAULT 0,
    build_year      integer     NOT NULL DEFAULT 0,
    execution_id    bigint      NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (region, deal_ym, serial)
);
-- aptTrade counts its domain rows by execution at the end of every run.
CREATE INDEX apt_trade_execution_idx ON apt_trade (execution_id);

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

-- exposure_import stages one `radar import exposure` run inside its
-- transaction, so the importer streams the file instead of holding it in
-- memory: lines are copied here in batches (bad ones with their reason), the
-- repeats of a company are found by SQL, the good lines go to exposure, and
-- the staged rows are deleted before the commit. UNLOGGED: nothing here
-- outlives its transaction.
CREATE UNLOGGED TABLE exposure_import (
    import_id       bigint  NOT NULL,
    line            integer NOT NULL,
    corp_code       text,
    outstanding_krw bigint,
    reason          text,
    PRIMARY KEY (import_id, line)
);

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

-- company is DART's corp-code archive as corpCodeSync last loaded it.
-- tracked marks the construction companies the radar watches (the name rule
-- of jobs/corpcode). Rows are upserted, never deleted: a company DART drops
-- keeps its last known row.
CREATE TABLE company (
    corp_code    text        PRIMARY KEY,
    name         text        NOT NULL,
    eng_name     text        NOT NULL DEFAULT '',
    stock_code   text,
    modify_date  date,
    tracked      boolean     NOT NULL DEFAULT false,
    execution_id bigint      NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX company_tracked_idx ON company (corp_code) WHERE tracked;
CREATE INDEX company_stock_code_idx ON company (stock_code) WHERE stock_code IS NOT NULL;
CREATE INDEX company_execution_idx ON company (execution_id);

-- corp_code_download remembers the archive an instance of corpCodeSync
-- downloaded, so a resumed execution reuses the file while it exists and
-- downloads again (a new file, new chunk keys) when it is gone.
CREATE TABLE corp_code_download (
    instance_id   bigint      PRIMARY KEY,
    path          text        NOT NULL,
    sha256        text        NOT NULL,
    size_bytes    bigint      NOT NULL,
    companies     integer     NOT NULL,
    downloaded_at timestamptz NOT NULL DEFAULT now()
);

-- company_region maps a company to the regions (5-digit LAWD codes) it
-- mostly builds in; metrics compares apartment trades there. corpCodeSync
-- leaves it alone; `radar dev` seeds it from the fake upstream.
CREATE TABLE company_region (
    corp_code text NOT NULL,
    region    text NOT NULL,
    PRIMARY KEY (corp_code, region)
);

-- filing is one DART disclosure; risk_flag and risk_reason come from the
-- rule list of jobs/filing.
CREATE TABLE filing (
    rcept_no     text        PRIMARY KEY,
    corp_code    text        NOT NULL,
    corp_name    text        NOT NULL DEFAULT '',
    report_nm    text        NOT NULL,
    rcept_dt     date        NOT NULL,
    flr_nm       text        NOT NULL DEFAULT '',
    rm           text        NOT NULL DEFAULT '',
    risk_flag    boolean     NOT NULL DEFAULT false,
    risk_reason  text        NOT NULL DEFAULT '',
    execution_id bigint      NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX filing_corp_date_idx ON filing (corp_code, rcept_dt);
CREATE INDEX filing_risk_idx ON filing (corp_code, rcept_dt) WHERE risk_flag;
CREATE INDEX filing_execution_idx ON filing (execution_id);

-- stock_price is one listed stock's prices on one trading day (KRX).
CREATE TABLE stock_price (
    short_code   text        NOT NULL,
    trade_date   date        NOT NULL,
    corp_code    text        NOT NULL,
    close        bigint      NOT NULL,
    open         bigint      NOT NULL,
    high         bigint      NOT NULL,
    low          bigint      NOT NULL,
    volume       bigint      NOT NULL,
    market_cap   bigint      NOT NULL,
    execution_id bigint      NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (short_code, trade_date)
);
CREATE INDEX stock_price_corp_date_idx ON stock_price (corp_code, trade_date DESC);
CREATE INDEX stock_price_execution_idx ON stock_price (execution_id);

-- risk_metric is one tracked company's risk metrics on one date (metrics).
-- NULL means "not computable" (unlisted, no grades, no regions...).
CREATE TABLE risk_metric (
    corp_code            text        NOT NULL,
    metric_date          date        NOT NULL,
    drawdown_20d         numeric,
    risk_filings_90d     integer     NOT NULL DEFAULT 0,
    grade_change_notches integer,
    apt_volume_change    numeric,
    apt_price_change     numeric,
    execution_id         bigint      NOT NULL,
    updated_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (corp_code, metric_date)
);
CREATE INDEX risk_metric_date_idx ON risk_metric (metric_date);
CREATE INDEX risk_metric_execution_idx ON risk_metric (execution_id);

-- risk_alert is one rule that fired for a company on a date (rules), with
-- the values that fired it. Re-running a date replaces its alerts.
CREATE TABLE risk_alert (
    id           bigserial   PRIMARY KEY,
    corp_code    text        NOT NULL,
    alert_date   date        NOT NULL,
    rule         text        NOT NULL,
    severity     text        NOT NULL CHECK (severity IN ('low', 'medium', 'high', 'critical')),
    "values"     jsonb       NOT NULL DEFAULT '{}',
    execution_id bigint      NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (alert_date, corp_code, rule)
);
CREATE INDEX risk_alert_corp_date_idx ON risk_alert (corp_code, alert_date DESC);
CREATE INDEX risk_alert_execution_idx ON risk_alert (execution_id);

-- +goose Down
DROP TABLE risk_alert;
DROP TABLE risk_metric;
DROP TABLE stock_price;
DROP TABLE filing;
DROP TABLE company_region;
DROP TABLE corp_code_download;
DROP TABLE company;
DROP TABLE credit_eval_plan;
DROP TABLE exposure_import;
DROP TABLE credit_grade;
DROP TABLE exposure;
DROP TABLE apt_trade;

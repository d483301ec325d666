-- +goose Up
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

-- +goose Down
DROP TABLE exposure_import;

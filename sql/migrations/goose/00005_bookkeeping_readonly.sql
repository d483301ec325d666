-- +goose Up
-- +goose ENVSUB ON

-- Migration bookkeeping is the migrator's alone. 00004 granted the
-- application role (BUILDRISK_DB_APP_ROLE) writes on every table, these two
-- included: an api or a worker could then insert a goose version (so that
-- `radar migrate` skips a real migration), delete one (so that the next
-- migrate breaks) or LOCK either table ACCESS EXCLUSIVE (which needs UPDATE,
-- DELETE or TRUNCATE). They keep SELECT: the api refuses to start on a
-- schema that is behind.
REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON goose_db_version, river_migration FROM "${BUILDRISK_DB_APP_ROLE:-radar_app}";
GRANT SELECT ON goose_db_version, river_migration TO "${BUILDRISK_DB_APP_ROLE:-radar_app}";

-- +goose Down
-- +goose ENVSUB ON
GRANT SELECT, INSERT, UPDATE, DELETE ON goose_db_version, river_migration TO "${BUILDRISK_DB_APP_ROLE:-radar_app}";

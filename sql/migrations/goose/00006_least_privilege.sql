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

-- The api gets a role of its own (BUILDRISK_DB_API_ROLE, default
-- radar_app_api; its login role, radar_api in deploy/, is a member of it),
-- narrower than the application role the workers keep: it reads every
-- table, writes only what an api call changes (a request and its River job,
-- a new job instance, an execution's stop or abandon, console sessions),
-- and cannot write checkpoints, domain rows, worker rows, call budgets or
-- migration bookkeeping; without UPDATE, DELETE or TRUNCATE on a table it
-- cannot LOCK it beyond ROW SHARE either. Console sessions are the api's
-- alone: the workers' role loses every right on them. Created NOLOGIN when
-- missing (the migrating user then needs CREATEROLE).
-- +goose StatementBegin
DO '
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = ''${BUILDRISK_DB_API_ROLE:-radar_app_api}'') THEN
        CREATE ROLE "${BUILDRISK_DB_API_ROLE:-radar_app_api}" NOLOGIN;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL; -- created concurrently by another migrator of the same cluster
END';
-- +goose StatementEnd

GRANT USAGE ON SCHEMA public TO "${BUILDRISK_DB_API_ROLE:-radar_app_api}";
GRANT SELECT ON ALL TABLES IN SCHEMA public TO "${BUILDRISK_DB_API_ROLE:-radar_app_api}";
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO "${BUILDRISK_DB_API_ROLE:-radar_app_api}";
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO "${BUILDRISK_DB_API_ROLE:-radar_app_api}";
GRANT INSERT, UPDATE ON job_request, job_instance, river_job TO "${BUILDRISK_DB_API_ROLE:-radar_app_api}";
GRANT UPDATE ON job_execution TO "${BUILDRISK_DB_API_ROLE:-radar_app_api}";
GRANT INSERT, UPDATE, DELETE ON console_session TO "${BUILDRISK_DB_API_ROLE:-radar_app_api}";
-- The audit trail is append-only for the api; the workers do not touch it.
GRANT INSERT ON audit_event TO "${BUILDRISK_DB_API_ROLE:-radar_app_api}";
REVOKE ALL ON audit_event FROM "${BUILDRISK_DB_APP_ROLE:-radar_app}";
-- Tables the owner creates later are readable, nothing more.
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO "${BUILDRISK_DB_API_ROLE:-radar_app_api}";
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO "${BUILDRISK_DB_API_ROLE:-radar_app_api}";

REVOKE ALL ON console_session FROM "${BUILDRISK_DB_APP_ROLE:-radar_app}";

-- +goose Down
-- +goose ENVSUB ON
GRANT SELECT, INSERT, UPDATE, DELETE ON console_session, audit_event TO "${BUILDRISK_DB_APP_ROLE:-radar_app}";
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE USAGE, SELECT ON SEQUENCES FROM "${BUILDRISK_DB_API_ROLE:-radar_app_api}";
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE SELECT ON TABLES FROM "${BUILDRISK_DB_API_ROLE:-radar_app_api}";
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM "${BUILDRISK_DB_API_ROLE:-radar_app_api}";
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM "${BUILDRISK_DB_API_ROLE:-radar_app_api}";
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA public FROM "${BUILDRISK_DB_API_ROLE:-radar_app_api}";
REVOKE USAGE ON SCHEMA public FROM "${BUILDRISK_DB_API_ROLE:-radar_app_api}";
GRANT SELECT, INSERT, UPDATE, DELETE ON goose_db_version, river_migration TO "${BUILDRISK_DB_APP_ROLE:-radar_app}";

-- +goose Up
-- +goose ENVSUB ON

-- Least privilege. `radar migrate` runs as the schema owner; the api and the
-- workers connect as login roles that are members of one application role
-- (BUILDRISK_DB_APP_ROLE, default radar_app), which may read and write
-- every table of the application and of River, but not alter, drop or
-- truncate any (only an owner can). The role is created NOLOGIN when it does
-- not exist yet (the migrating user then needs CREATEROLE); login roles are
-- made by the operator: CREATE ROLE radar_api LOGIN PASSWORD '...' IN ROLE
-- radar_app (see SECURITY.md).
-- (A single-quoted body: ENVSUB would read dollar quotes as variables.)
-- +goose StatementBegin
DO '
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = ''${BUILDRISK_DB_APP_ROLE:-radar_app}'') THEN
        CREATE ROLE "${BUILDRISK_DB_APP_ROLE:-radar_app}" NOLOGIN;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL; -- created concurrently by another migrator of the same cluster
END';
-- +goose StatementEnd

GRANT USAGE ON SCHEMA public TO "${BUILDRISK_DB_APP_ROLE:-radar_app}";
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "${BUILDRISK_DB_APP_ROLE:-radar_app}";
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO "${BUILDRISK_DB_APP_ROLE:-radar_app}";
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO "${BUILDRISK_DB_APP_ROLE:-radar_app}";

-- Tables and sequences the owner creates later (River's next migrations,
-- ours) get the same grants.
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO "${BUILDRISK_DB_APP_ROLE:-radar_app}";
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO "${BUILDRISK_DB_APP_ROLE:-radar_app}";
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT EXECUTE ON FUNCTIONS TO "${BUILDRISK_DB_APP_ROLE:-radar_app}";

-- +goose Down
-- +goose ENVSUB ON
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE EXECUTE ON FUNCTIONS FROM "${BUILDRISK_DB_APP_ROLE:-radar_app}";
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE USAGE, SELECT, UPDATE ON SEQUENCES FROM "${BUILDRISK_DB_APP_ROLE:-radar_app}";
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE SELECT, INSERT, UPDATE, DELETE ON TABLES FROM "${BUILDRISK_DB_APP_ROLE:-radar_app}";
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA public FROM "${BUILDRISK_DB_APP_ROLE:-radar_app}";
REVOKE USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public FROM "${BUILDRISK_DB_APP_ROLE:-radar_app}";
REVOKE SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public FROM "${BUILDRISK_DB_APP_ROLE:-radar_app}";
REVOKE USAGE ON SCHEMA public FROM "${BUILDRISK_DB_APP_ROLE:-radar_app}";

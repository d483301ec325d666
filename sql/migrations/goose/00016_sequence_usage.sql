-- +goose Up
-- +goose ENVSUB ON

-- Sequences are taken from, never moved. 00004 granted the application role
-- (BUILDRISK_DB_APP_ROLE) USAGE, SELECT and UPDATE on every sequence, and
-- the same by default on later ones; UPDATE is setval: a worker (or an api
-- made before 00006) could set job_request_id_seq back to 1, so that every
-- new request collides with an old one's key, or audit_event_id_seq, so
-- that every later audit insert fails. nextval needs USAGE alone, and
-- nothing else of a sequence is used. The workers do not write the audit
-- trail (00006), so they lose its sequence too. The api's role
-- (BUILDRISK_DB_API_ROLE) keeps USAGE and loses SELECT (last_value), which
-- it never reads.
REVOKE SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public FROM "${BUILDRISK_DB_APP_ROLE:-radar_app}";
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO "${BUILDRISK_DB_APP_ROLE:-radar_app}";
REVOKE ALL ON SEQUENCE audit_event_id_seq FROM "${BUILDRISK_DB_APP_ROLE:-radar_app}";
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE SELECT, UPDATE ON SEQUENCES FROM "${BUILDRISK_DB_APP_ROLE:-radar_app}";
REVOKE SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public FROM "${BUILDRISK_DB_API_ROLE:-radar_app_api}";
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE SELECT, UPDATE ON SEQUENCES FROM "${BUILDRISK_DB_API_ROLE:-radar_app_api}";

-- +goose Down
-- +goose ENVSUB ON
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON SEQUENCES TO "${BUILDRISK_DB_API_ROLE:-radar_app_api}";
GRANT SELECT ON ALL SEQUENCES IN SCHEMA public TO "${BUILDRISK_DB_API_ROLE:-radar_app_api}";
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO "${BUILDRISK_DB_APP_ROLE:-radar_app}";
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO "${BUILDRISK_DB_APP_ROLE:-radar_app}";

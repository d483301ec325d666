#!/bin/sh
# Runs once, when the postgres container initialises an empty data
# directory. It makes the login roles of the services: the workers connect
# as a member of radar_app, which `radar migrate` (as the owner,
# POSTGRES_USER) grants read and write on every table but no DDL, TRUNCATE
# or DROP (nor the migration bookkeeping, nor console sessions); the api as
# a member of radar_app_api, which reads every table and writes only
# requests, their River jobs, instances, executions, console sessions and
# Idempotency-Key records.
# Passwords come from the environment, never from here.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v api_password="$RADAR_API_PASSWORD" -v worker_password="$RADAR_WORKER_PASSWORD" <<'SQL'
CREATE ROLE radar_app NOLOGIN;
CREATE ROLE radar_app_api NOLOGIN;
CREATE ROLE radar_api LOGIN PASSWORD :'api_password' IN ROLE radar_app_api;
CREATE ROLE radar_worker LOGIN PASSWORD :'worker_password' IN ROLE radar_app;
SQL

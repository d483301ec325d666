package apptest

// PgbouncerEnv turns on the PgBouncer transaction-pooling mode.
var PgbouncerEnv = map[string]string{"BUILDRISK_DB_PGBOUNCER": "transaction"}

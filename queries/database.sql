-- name: DatabaseIdentity :one
-- DatabaseIdentity reads what identifies the database a connection
-- reached, for the processes' failover detection (worker.DatabaseWatch):
-- the cluster's system identifier (initdb picks it; physical replicas and
-- backups keep it), the timeline it writes WAL on (each promotion of a
-- replica starts the next one), whether it is a standby, and the settings
-- that make a commit wait for a synchronous standby, as this session sees
-- them. On a primary the timeline is that of the WAL insert position
-- (pg_walfile_name's first eight hex digits), current from the moment of a
-- promotion, where pg_control_checkpoint's lags until the next checkpoint;
-- a standby, which inserts no WAL, reports its last restartpoint's. Every
-- function read here is executable by any role.
SELECT s.system_identifier::bigint AS system_identifier,
       (CASE WHEN pg_is_in_recovery() THEN c.timeline_id::bigint
             ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
        END)::bigint AS timeline,
       pg_is_in_recovery()::boolean AS in_recovery,
       current_setting('synchronous_standby_names')::text AS synchronous_standby_names,
       current_setting('synchronous_commit')::text AS synchronous_commit
FROM pg_control_system() s, pg_control_checkpoint() c;

-- name: DatabaseTimelineFence :one
-- DatabaseTimelineFence moves the service's id sequences past every value
-- an earlier timeline could have issued, once per timeline, and returns
-- the timeline the primary writes on (0 on a standby). Every connection of
-- the service's pools runs it before its first use (pgfence), so no id is
-- drawn on a new timeline before the fence (migration 00020).
SELECT database_timeline_fence()::bigint AS timeline;

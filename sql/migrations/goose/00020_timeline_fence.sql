-- +goose Up

-- Ids never reissued across a failover. A sequence is WAL-logged in blocks:
-- after a failover to an asynchronous replica that missed the last commits,
-- the promoted replica's sequences stand where the replica last heard of
-- them, and would hand out again every id the lost window answered (a
-- request id a client is still polling then names another request). So,
-- on the first connection to a timeline not seen before, and before that
-- connection writes anything, database_timeline_fence moves each of the
-- service's sequences to at least (timeline - 1) << 40: a window of 2^40
-- (about 10^12) ids per timeline, more than any timeline can issue, so no
-- value the lost window drew on the previous timeline can come again. Ids
-- stay increasing int64 numbers: a cursor keeps its order.
--
-- Moved: the bigint sequences of the schema but River's and goose's.
-- River's tables and sequences are River's: they are not moved, and a
-- River job id may be reissued after an asynchronous failover. No public
-- id is a River job id; job_request.river_job_id is written in the same
-- transaction as the River job, so both survive or vanish together.

-- database_timeline records the timelines of this database whose ids were
-- fenced, so that the fence runs once per timeline (a primary key lookup
-- afterwards).
CREATE TABLE database_timeline (
    timeline          bigint      PRIMARY KEY,
    system_identifier bigint      NOT NULL,
    fenced_at         timestamptz NOT NULL DEFAULT now()
);

-- database_timeline_fence runs the fence for the timeline the primary now
-- writes on and returns it (0 on a standby, which writes nothing). It runs
-- as its owner (SECURITY DEFINER): the application roles draw ids
-- (USAGE) but may not move sequences (00016). Concurrent first calls
-- serialize on an advisory lock; setval to greatest(...) is idempotent.
-- +goose StatementBegin
CREATE FUNCTION database_timeline_fence() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_catalog AS $$
DECLARE
    tl bigint;
    floor_value bigint;
BEGIN
    IF pg_is_in_recovery() THEN
        RETURN 0;
    END IF;
    tl := ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint;
    IF EXISTS (SELECT 1 FROM database_timeline WHERE timeline = tl) THEN
        RETURN tl;
    END IF;
    -- 'radar-timeline-fence' as a lock key (hashtext of it, fixed).
    PERFORM pg_advisory_xact_lock(hashtext('radar-timeline-fence'));
    IF EXISTS (SELECT 1 FROM database_timeline WHERE timeline = tl) THEN
        RETURN tl;
    END IF;
    floor_value := (tl - 1) << 40;
    IF floor_value > 0 THEN
        PERFORM setval(format('%I.%I', s.schemaname, s.sequencename)::regclass, floor_value)
        FROM pg_sequences s
        WHERE s.schemaname = current_schema()
          AND s.sequencename NOT LIKE 'river\_%'
          AND s.sequencename NOT LIKE 'goose\_%'
          AND s.data_type = 'bigint'::regtype
          AND coalesce(s.last_value, 0) < floor_value;
    END IF;
    INSERT INTO database_timeline (timeline, system_identifier)
    SELECT tl, system_identifier FROM pg_control_system()
    ON CONFLICT (timeline) DO NOTHING;
    RETURN tl;
END
$$;
-- +goose StatementEnd

-- The table is the fence's own: the application roles may read it.
-- +goose ENVSUB ON
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON database_timeline FROM "${BUILDRISK_DB_APP_ROLE:-radar_app}";
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON database_timeline FROM "${BUILDRISK_DB_API_ROLE:-radar_app_api}";

-- The timeline the schema was made on needs no fence: nothing was lost yet.
SELECT database_timeline_fence() WHERE NOT pg_is_in_recovery();

-- +goose Down
DROP FUNCTION database_timeline_fence();
DROP TABLE database_timeline;

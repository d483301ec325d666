-- name: AuditEventInsert :exec
-- AuditEventInsert appends one event to the audit trail.
INSERT INTO audit_event (actor, client, action, target, detail)
VALUES (@actor, @client, @action, @target, @detail);

-- name: AuditEventList :many
-- AuditEventList returns the newest events first, those before cursor (an
-- id; 0 for the first page).
SELECT id, at, actor, client, action, target, detail
FROM audit_event
WHERE @cursor::bigint = 0 OR id < @cursor::bigint
ORDER BY id DESC
LIMIT @row_limit::int;

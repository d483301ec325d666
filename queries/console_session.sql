-- name: ConsoleSessionInsert :exec
-- ConsoleSessionInsert records a new console login.
INSERT INTO console_session (id_hash, role, token_name, expires_at)
VALUES (@id_hash, @role, @token_name, @expires_at);

-- name: ConsoleSessionGetActive :one
-- ConsoleSessionGetActive returns the role of a session that is neither
-- revoked nor expired (on the database's clock).
SELECT role, token_name, expires_at
FROM console_session
WHERE id_hash = @id_hash AND revoked_at IS NULL AND expires_at > now();

-- name: ConsoleSessionRevoke :execrows
-- ConsoleSessionRevoke ends one session (logout).
UPDATE console_session SET revoked_at = now()
WHERE id_hash = @id_hash AND revoked_at IS NULL;

-- name: ConsoleSessionRevokeAll :execrows
-- ConsoleSessionRevokeAll ends every session (an operator's "sign out
-- everywhere").
UPDATE console_session SET revoked_at = now()
WHERE revoked_at IS NULL AND expires_at > now();

-- name: ConsoleSessionRevokeOwn :execrows
-- ConsoleSessionRevokeOwn ends every session opened with one token (its
-- name and role): a viewer's "sign out everywhere".
UPDATE console_session SET revoked_at = now()
WHERE token_name = @token_name AND role = @role AND revoked_at IS NULL AND expires_at > now();

-- name: ConsoleSessionDeleteExpired :execrows
-- ConsoleSessionDeleteExpired forgets sessions that ended a day ago or more.
DELETE FROM console_session
WHERE expires_at < now() - interval '1 day' OR revoked_at < now() - interval '1 day';

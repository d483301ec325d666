-- name: CorpCodeDownloadGet :one
SELECT * FROM corp_code_download WHERE instance_id = @instance_id;

-- name: CorpCodeDownloadUpsert :exec
-- CorpCodeDownloadUpsert records the archive an instance downloaded,
-- replacing the record of a file that is gone.
INSERT INTO corp_code_download (instance_id, path, sha256, size_bytes, companies, downloaded_at)
VALUES (@instance_id, @path, @sha256, @size_bytes, @companies, now())
ON CONFLICT (instance_id) DO UPDATE
SET path = excluded.path, sha256 = excluded.sha256, size_bytes = excluded.size_bytes,
    companies = excluded.companies, downloaded_at = now();

-- name: CorpCodeDownloadListOthers :many
-- CorpCodeDownloadListOthers returns the downloads of every other instance:
-- only the newest instance can ever be resumed, so their files are garbage.
SELECT * FROM corp_code_download WHERE instance_id <> @instance_id;

-- name: CorpCodeDownloadDelete :exec
DELETE FROM corp_code_download WHERE instance_id = @instance_id;

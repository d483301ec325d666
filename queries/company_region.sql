-- name: CompanyRegionInsert :execrows
-- CompanyRegionInsert adds company→region pairs; pairs already present are
-- left alone.
INSERT INTO company_region (corp_code, region)
SELECT unnest(@corp_codes::text[]), unnest(@regions::text[])
ON CONFLICT DO NOTHING;

-- name: CompanyRegionListByCorp :many
SELECT region FROM company_region WHERE corp_code = @corp_code ORDER BY region;

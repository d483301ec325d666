-- +goose Up

-- radar_owned passes a fenced statement's execution status through, or
-- raises SQLSTATE BR001 when the statement found no execution (NULL): the
-- run lost its ownership. A fenced commit that finds no row must undo the
-- writes sent with it; inside an explicit transaction the worker could roll
-- back itself, but a commit sent as one implicit transaction (a pipelined
-- batch, one round trip) is committed by the server unless a statement
-- fails, so the fence has to fail.
-- +goose StatementBegin
CREATE FUNCTION radar_owned(status text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    IF status IS NULL THEN
        RAISE EXCEPTION 'the execution is no longer active under this worker and lease epoch'
            USING ERRCODE = 'BR001';
    END IF;
    RETURN status;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION radar_owned(text);

-- Named ingest clients: the name of the client that sent each original,
-- NULL for the default client (a single ingest token, or none), whose
-- idempotency keys stay bare. A named client's keys are stored under its
-- namespace ("client:<name>/<key>"), so the unique index on
-- idempotency_key keeps each client's keys apart without a change.

-- +goose Up
ALTER TABLE "{events}" ADD COLUMN client TEXT;

-- +goose Down
ALTER TABLE "{events}" DROP COLUMN client;

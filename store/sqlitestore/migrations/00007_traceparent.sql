-- Tracing: the W3C traceparent of the ingest request, stored
-- with the original (the reconciler's and the operator's re-publishes link
-- to it) and with its outbox entry (the dispatcher's relay span continues
-- it). NULL when the request was not traced, so the columns cost nothing
-- while tracing is off.

-- +goose Up
ALTER TABLE "{events}" ADD COLUMN traceparent TEXT;
ALTER TABLE "{outbox}" ADD COLUMN traceparent TEXT;

-- +goose Down
ALTER TABLE "{outbox}" DROP COLUMN traceparent;
ALTER TABLE "{events}" DROP COLUMN traceparent;

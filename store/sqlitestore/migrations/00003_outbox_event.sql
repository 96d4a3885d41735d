-- The index of the event journey (store.Store.OutboxEntries): an
-- original's outbox entries by its id. An index holds the rowid (seq), so
-- the entries of one event come in seq order without a sort.

-- +goose Up
CREATE INDEX "{outbox}_event" ON "{outbox}" (event_id);

-- +goose Down
DROP INDEX "{outbox}_event";

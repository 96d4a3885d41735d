-- Indexes of the operator commands (replay by boundary, verify): listing
-- and counting originals by a window of occurredAt or createdAt, paged by
-- (time, id), and by one device's window. See store.Store.ListEvents.

-- +goose Up

-- A window of occurredAt, any source (replay --by occurred, verify).
CREATE INDEX "{events}_occurred" ON "{events}" (occurred_at, id);
-- A window of createdAt, any source (replay --by created).
CREATE INDEX "{events}_created" ON "{events}" (created_at, id);
-- One device's window of occurredAt (replay --source S --device D).
CREATE INDEX "{events}_device" ON "{events}" (source_key, device_key, occurred_at, id);

-- +goose Down
DROP INDEX "{events}_device";
DROP INDEX "{events}_created";
DROP INDEX "{events}_occurred";

-- The retention of the originals (store.Store.DeleteSynced,
-- --event-retention). Counts.Total is max(rowid) of events minus the
-- originals removed; DeleteSynced never removes the newest original, so
-- max(rowid) never goes down and no rowid is handed out twice.

-- +goose Up
CREATE TABLE events_removed (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n  INTEGER NOT NULL
);
INSERT INTO events_removed (id, n) VALUES (1, 0);

-- +goose Down
DROP TABLE events_removed;

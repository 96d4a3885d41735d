-- Marks: named timestamps (store.Store.SetMark): the last reset of a
-- stream's Redis data, the end of the last sweep, the last cancel of
-- replays. They were the checkpoint times of leases taken for a moment;
-- a store migrated from before this table keeps those leases, which are
-- read while the mark is absent.

-- +goose Up
CREATE TABLE marks (
    name TEXT    PRIMARY KEY,
    at   INTEGER NOT NULL -- Unix milliseconds
) WITHOUT ROWID;

-- +goose Down
DROP TABLE marks;

-- +goose Up
CREATE TABLE events (
    event_id        text PRIMARY KEY,
    idempotency_key text NOT NULL UNIQUE,
    source_key      text NOT NULL,
    device_key      text NOT NULL,
    type            text NOT NULL,
    occurred_at     timestamptz NOT NULL,
    payload         jsonb NOT NULL,
    created_at      timestamptz NOT NULL,
    projected_at    timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX events_device_occurred_at ON events (source_key, device_key, occurred_at);

-- One row per (source, device, UTC day). A row grows only in the transaction
-- that inserted the event row, so a replay never counts twice.
CREATE TABLE device_daily_stats (
    source_key        text NOT NULL,
    device_key        text NOT NULL,
    day               date NOT NULL,
    event_count       bigint NOT NULL,
    first_occurred_at timestamptz NOT NULL,
    last_occurred_at  timestamptz NOT NULL,
    PRIMARY KEY (source_key, device_key, day)
);

-- +goose Down
DROP TABLE device_daily_stats;
DROP TABLE events;

-- +goose Up
-- The last run of the read model's audit, one row per stream: the reconcile
-- role (reconcile --every, dev) writes it, every role with PostgreSQL shows
-- it in /v1/status.
CREATE TABLE audit_runs (
    stream text PRIMARY KEY,
    ran_at timestamptz NOT NULL,
    report jsonb NOT NULL
);

-- +goose Down
DROP TABLE audit_runs;

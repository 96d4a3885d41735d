-- The demo read model as a projection file: one row per original in
-- events, and per source, device and UTC day the count and the first and
-- last occurrence in device_daily_stats.
--
-- Idempotency is the file's to keep: the rows already there are skipped
-- (ON CONFLICT DO NOTHING), and the statistics grow only from the rows this
-- statement inserted (RETURNING feeds the second insert), so a redelivery,
-- a replay or a reconciliation never counts twice. The statement runs once
-- per batch over the batch's rows (its parameters all sit in one VALUES
-- list), so the statistics are aggregated per key (GROUP BY) and written in
-- key order (ORDER BY), which keeps concurrent batches from deadlocking.
--
-- key: events.event_id
WITH ins AS (
	INSERT INTO events (event_id, idempotency_key, source_key, device_key, type, occurred_at, payload, created_at)
	VALUES (:eventId, :idempotencyKey, :sourceKey, :deviceKey, :type, :occurredAt, :payload, :createdAt)
	ON CONFLICT DO NOTHING
	RETURNING source_key, device_key, occurred_at
)
INSERT INTO device_daily_stats AS s (source_key, device_key, day, event_count, first_occurred_at, last_occurred_at)
SELECT source_key, device_key, (occurred_at AT TIME ZONE 'UTC')::date, count(*), min(occurred_at), max(occurred_at)
FROM ins
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3
ON CONFLICT (source_key, device_key, day) DO UPDATE SET
	event_count = s.event_count + EXCLUDED.event_count,
	first_occurred_at = LEAST(s.first_occurred_at, EXCLUDED.first_occurred_at),
	last_occurred_at = GREATEST(s.last_occurred_at, EXCLUDED.last_occurred_at);

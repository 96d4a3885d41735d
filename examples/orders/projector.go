package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/worker"
)

// readModel is the service's own schema in PostgreSQL, applied by every
// role that opens PostgreSQL (setup); the lock makes processes
// that start together take turns (CREATE TABLE IF NOT EXISTS alone races).
const readModel = `SELECT pg_advisory_xact_lock(hashtext('orders read model'));
CREATE TABLE IF NOT EXISTS orders_read (order_id text PRIMARY KEY, customer text NOT NULL,
	amount_cents bigint NOT NULL, placed_at timestamptz NOT NULL, event_id text NOT NULL);
CREATE TABLE IF NOT EXISTS customer_orders (customer text PRIMARY KEY, orders bigint NOT NULL,
	amount_cents bigint NOT NULL)`

// projectOrders inserts the orders that are not in orders_read yet and
// adds to each customer's counters only the rows it actually inserted, in
// one statement: an event delivered again (redelivery, replay, the
// reconciler's re-publish) changes nothing.
const projectOrders = `WITH inserted AS (
	INSERT INTO orders_read (order_id, customer, amount_cents, placed_at, event_id)
	SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::timestamptz[], $5::text[])
	ON CONFLICT (order_id) DO NOTHING
	RETURNING customer, amount_cents)
INSERT INTO customer_orders AS c (customer, orders, amount_cents)
SELECT customer, count(*), sum(amount_cents) FROM inserted GROUP BY customer ORDER BY customer
ON CONFLICT (customer) DO UPDATE SET orders = c.orders + EXCLUDED.orders, amount_cents = c.amount_cents + EXCLUDED.amount_cents`

// projector is the service's worker.Projector: orders into orders_read,
// counted per customer in customer_orders. Events of other types are not
// its own and are skipped (they are still marked synced).
type projector struct{}

// Project writes the batch's orders in the worker's transaction tx.
func (projector) Project(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
	var ids, customers, eventIDs []string
	var amounts []int64
	var placed []time.Time
	for _, ev := range events {
		if ev.Type != orderPlaced {
			continue
		}
		var o order
		if err := json.Unmarshal(ev.Payload, &o); err != nil {
			// The record's own failure: after --max-deliveries it is
			// dead-lettered, the batch's other orders go through.
			return fmt.Errorf("error decoding the order of event %s: %w (%w)", ev.ID, err, worker.ErrRecord)
		}
		ids, customers, eventIDs = append(ids, o.ID), append(customers, o.Customer), append(eventIDs, ev.ID)
		amounts, placed = append(amounts, o.AmountCents), append(placed, ev.OccurredAt)
	}
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, projectOrders, ids, customers, amounts, placed, eventIDs)
	return err
}

package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

// ordersTable is the service's own table in its system of record, beside
// outboxd's tables in the same SQLite file.
const ordersTable = `CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, customer TEXT NOT NULL,
	amount_cents INTEGER NOT NULL, placed_at TEXT NOT NULL, event_id TEXT NOT NULL)`

// orderPlaced is the type of the event of a new order.
const orderPlaced = "order.placed"

// order is what a client posts, and the payload of its event.
type order struct {
	ID          string `json:"id"`
	Customer    string `json:"customer"`
	AmountCents int64  `json:"amountCents"`
	// PlacedAt is the client's time (RFC 3339), so that a retry posts the
	// very same order.
	PlacedAt string `json:"placedAt"`
}

// ordersHandler serves POST /orders: 201 for a new order, 200 for one
// already placed (a client's retry), 400 for a bad one, 409 for an id
// already used by another order, 503 (retry) when the store is busy.
type ordersHandler struct {
	st *sqlitestore.Store
	w  *outbox.Writer
}

func (h *ordersHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var o order
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	err := dec.Decode(&o)
	if _, terr := time.Parse(time.RFC3339, o.PlacedAt); err != nil || terr != nil || o.AmountCents <= 0 ||
		outbox.KeyProblem(o.ID) != "" || outbox.KeyProblem(o.Customer) != "" {
		http.Error(w, "an order needs an id, a customer, amountCents above 0 and placedAt (RFC 3339)", http.StatusBadRequest)
		return
	}
	res, err := h.place(r.Context(), o)
	switch {
	case errors.Is(err, outbox.ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case errors.Is(err, outbox.ErrIdempotencyMismatch):
		http.Error(w, "order "+o.ID+" was placed with other content", http.StatusConflict)
	case errors.Is(err, outbox.ErrDuplicateKey), errors.Is(err, store.ErrUnavailable):
		w.Header().Set("Retry-After", "1")
		http.Error(w, "busy, retry", http.StatusServiceUnavailable)
	case err != nil:
		http.Error(w, "error placing the order", http.StatusInternalServerError)
	default:
		w.Header().Set("Content-Type", "application/json")
		if !res.Duplicate {
			w.WriteHeader(http.StatusCreated)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"eventId": res.ID, "duplicate": res.Duplicate})
	}
}

// place writes the order and its event in one transaction of the store's
// (RunTx), the event first: when the writer answers Duplicate, an earlier
// request for the same order (a retry after an answer the client never got)
// committed both, so the order's own row is skipped, and a retry is safe
// whatever happened to the first attempt.
func (h *ordersHandler) place(ctx context.Context, o order) (res outbox.Result, err error) {
	payload, err := json.Marshal(o)
	if err != nil {
		return res, err
	}
	err = h.st.RunTx(ctx, func(ctx context.Context, tx *sql.Tx, otx outbox.Tx) error {
		results, err := h.w.WriteInTx(ctx, otx, []outbox.Input{{IdempotencyKey: "order-" + o.ID, SourceKey: "orders",
			DeviceKey: o.Customer, OccurredAt: o.PlacedAt, Type: orderPlaced, Payload: payload}})
		if err != nil {
			return err
		}
		if res = results[0]; res.Duplicate {
			return nil // an earlier request committed the order too
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO orders (id, customer, amount_cents, placed_at, event_id) VALUES (?, ?, ?, ?, ?)`,
			o.ID, o.Customer, o.AmountCents, o.PlacedAt, res.ID)
		return err
	})
	return res, err
}

package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

// A service writes its own row and the event in one transaction of the
// store's: both commit or neither. The event goes first, so a run again
// after an unclear failure finds it a Duplicate and skips the row.
func ExampleStore_RunTx() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outboxd-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "app.db"), nil)
	if err != nil {
		panic(err)
	}
	defer st.Close(ctx)
	if err := st.Migrate(ctx, nil); err != nil {
		panic(err)
	}
	if _, err := st.DB().ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY)`); err != nil {
		panic(err)
	}
	w := outbox.NewWriter(st, nil)
	placeOrder := func() error {
		return st.RunTx(ctx, func(ctx context.Context, tx *sql.Tx, otx outbox.Tx) error {
			res, err := w.WriteInTx(ctx, otx, []outbox.Input{{IdempotencyKey: "order-42", SourceKey: "shop", DeviceKey: "till-1",
				OccurredAt: "2026-11-29T09:05:00Z"}})
			if err != nil || res[0].Duplicate {
				return err // a Duplicate: an earlier run committed the order too
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, 42)
			return err
		})
	}
	for range 2 { // the second run is a client's retry
		if err := placeOrder(); err != nil {
			panic(err)
		}
	}
	var orders int
	if err := st.DB().QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&orders); err != nil {
		panic(err)
	}
	ev, err := st.EventByKey(ctx, "order-42")
	if err != nil {
		panic(err)
	}
	fmt.Println(ev.DeviceKey, ev.State(), orders)
	// Output:
	// till-1 pending 1
}

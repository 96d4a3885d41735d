package outbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

// The writer stores an event in its own transaction (Write), or inside a
// transaction the caller runs, so that the caller's rows and the event
// commit together or not at all (WriteInTx). This is the README's snippet.
func ExampleWriter_WriteInTx() {
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
	res, err := w.Write(ctx, []outbox.Input{{SourceKey: "a", DeviceKey: "d", OccurredAt: "2026-11-29T09:00:00Z"}})
	if err != nil {
		panic(err)
	}
	fmt.Println("written:", res[0].Duplicate == false)

	inputs := []outbox.Input{{IdempotencyKey: "order-42", SourceKey: "shop", DeviceKey: "till-1", OccurredAt: "2026-11-29T09:05:00Z"}}
	tx, err := st.DB().BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, 42); err != nil {
		panic(err)
	}
	if _, err := w.WriteInTx(ctx, st.Tx(tx), inputs); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}

	ev, err := st.EventByKey(ctx, "order-42")
	if err != nil {
		panic(err)
	}
	var orders int
	if err := st.DB().QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&orders); err != nil {
		panic(err)
	}
	fmt.Println(ev.DeviceKey, ev.State(), orders)
	// Output:
	// written: true
	// till-1 pending 1
}

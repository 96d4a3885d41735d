// Command orders is an example service built on outboxd, the one
// docs/adopting.md walks through: it keeps orders in its own table of its
// SQLite system of record, takes them on its own route (POST /orders, see
// order.go), writing each order and its outboxd event in one store
// transaction, and projects them into its own PostgreSQL tables (see
// projector.go). Every outboxd role runs from this binary as from the stock
// one, with the same flags and OUTBOXD_* variables (`orders ingest`,
// `orders work`, `orders migrate`, …); the stock `outboxd dispatch` can
// relay its outbox as a sidecar.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/outboxd/outboxd/runner"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runner.Run(ctx, os.Args[1:], os.Stdout, os.Stderr,
		runner.WithProjector(projector{}),
		runner.WithSetup(setup),
		runner.WithRoute("POST /orders", func(env *runner.Env) http.Handler {
			return &ordersHandler{st: env.Store.(*sqlitestore.Store), w: env.Writer} // setup checked the store
		}))
	stop()
	os.Exit(code)
}

// setup creates the service's own tables where the role has the backend:
// orders beside outboxd's tables in the store, the read model in
// PostgreSQL. This example runs on the SQLite store only.
func setup(ctx context.Context, env *runner.Env) error {
	if env.Store != nil {
		st, ok := env.Store.(*sqlitestore.Store)
		if !ok {
			return errors.New("this example runs on the SQLite store (--store sqlite:PATH)")
		}
		if _, err := st.DB().ExecContext(ctx, ordersTable); err != nil {
			return fmt.Errorf("error creating the orders table: %w", err)
		}
	}
	if env.Postgres != nil {
		if _, err := env.Postgres.Exec(ctx, readModel); err != nil { // no arguments: one implicit transaction
			return fmt.Errorf("error creating the orders read model: %w", err)
		}
	}
	return nil
}

// Command orders is an example service built on outboxd, the one
// docs/adopting.md walks through: it keeps orders in its own table of its
// SQLite system of record, takes them on its own route (POST /orders, see
// orders.go), writing each order and its outboxd event in one store
// transaction, and projects them into its own PostgreSQL tables (see
// projector.go). Every outboxd role runs from this binary as from the stock
// one (`orders ingest`, `orders work`, `orders migrate`, …); the stock
// `outboxd dispatch` can relay its outbox as a sidecar.
//
// The service reads the settings it shares with the runner from the
// runner's own variables, so both always agree: OUTBOXD_STORE (an
// sqlite:PATH), OUTBOXD_STREAM and OUTBOXD_PARTITIONS (what its writer
// records in each outbox entry) and OUTBOXD_POSTGRES_URL (where its read
// model's tables are created). Give those four as variables, never as
// flags; every other flag is the stock binary's.
package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/runner"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// shared are the flags whose OUTBOXD_* variables the service reads itself.
var shared = []string{"store", "stream", "partitions", "postgres-url"}

// run is runner.Run with the service's options: its projector, its store
// and its route, for the roles that use them.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	for _, a := range args {
		if name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); strings.HasPrefix(a, "-") && slices.Contains(shared, name) {
			fmt.Fprintf(stderr, "orders: give --%s as OUTBOXD_%s: the service reads it too\n", name,
				strings.ToUpper(strings.ReplaceAll(name, "-", "_")))
			return runner.ExitUsage
		}
	}
	role := ""
	if len(args) > 0 {
		role = args[0]
	}
	var opts []runner.Option
	if role == "work" || role == "dev" || role == "migrate" { // the roles that write or create the read model
		if err := applySchema(ctx, cmp.Or(os.Getenv("OUTBOXD_POSTGRES_URL"), runner.PostgresURLDefault)); err != nil {
			fmt.Fprintf(stderr, "orders %s: %v\n", role, err)
			return runner.ExitFailure
		}
		opts = append(opts, runner.WithProjector(projector{}))
	}
	if role == "ingest" || role == "dev" { // the roles that serve POST /orders
		path, ok := strings.CutPrefix(cmp.Or(os.Getenv("OUTBOXD_STORE"), runner.StoreDefault), "sqlite:")
		partitions, err := strconv.Atoi(cmp.Or(os.Getenv("OUTBOXD_PARTITIONS"), "1"))
		if !ok || path == "" || err != nil || outbox.ValidatePartitions(partitions) != nil {
			fmt.Fprintf(stderr, "orders %s: OUTBOXD_STORE must be sqlite:PATH (this example runs on SQLite) and OUTBOXD_PARTITIONS 1 to %d\n",
				role, outbox.PartitionsMax)
			return runner.ExitUsage
		}
		st, err := sqlitestore.Open(ctx, path, nil)
		if err != nil {
			fmt.Fprintf(stderr, "orders %s: %v\n", role, err)
			return runner.ExitFailure
		}
		defer func() { _ = st.Close(context.WithoutCancel(ctx)) }()
		if _, err := st.DB().ExecContext(ctx, ordersTable); err != nil {
			fmt.Fprintf(stderr, "orders %s: error creating the orders table: %v\n", role, err)
			return runner.ExitFailure
		}
		h := &ordersHandler{st: st, w: outbox.NewWriter(st, &outbox.WriterConfig{Stream: os.Getenv("OUTBOXD_STREAM"), Partitions: partitions})}
		opts = append(opts, runner.WithStore(st), runner.WithRoute("POST /orders", h))
	}
	return runner.Run(ctx, args, stdout, stderr, opts...)
}

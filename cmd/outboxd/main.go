// Command outboxd keeps a PostgreSQL read model in step with a system of
// record (MongoDB, or an embedded SQLite file) through a transactional
// outbox. One binary, one role per subcommand; see README.md and
// `outboxd help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

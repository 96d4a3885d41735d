// Command outboxd keeps a PostgreSQL read model in step with a MongoDB system
// of record through a transactional outbox. See README.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/outboxd/outboxd/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Command outboxd keeps a PostgreSQL read model in step with a system of
// record (MongoDB, or an embedded SQLite file) through a transactional
// outbox. One binary, one role per subcommand; see README.md and
// `outboxd help`. It is package runner with no options: a team's own binary
// is these lines plus runner's options (docs/adopting.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/outboxd/outboxd/runner"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runner.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

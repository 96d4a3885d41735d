// Package cli implements the outboxd command line: one role per subcommand,
// flags with OUTBOXD_* fallbacks, exit codes 0 ok, 1 runtime failure, 2 usage
// or configuration error.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/logging"
	"github.com/outboxd/outboxd/internal/mongodb"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

var descriptions = map[string]string{
	"dev":       "migrations, then every role in one process (embedded MongoDB by default)",
	"ingest":    "HTTP API that writes originals and outbox entries in one MongoDB transaction",
	"dispatch":  "relay the outbox to the Redis stream (change stream + checkpoint)",
	"work":      "consume the stream and build the PostgreSQL read model",
	"reconcile": "re-publish old originals that never reached syncedAt (one sweep, or --every)",
	"migrate":   "apply the PostgreSQL schema and create the MongoDB indexes",
	"status":    "print GET /v1/status of a running instance",
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: outboxd <role> [flags]   (outboxd <role> -h lists the role's flags)")
	names := make([]string, 0, len(descriptions))
	for n := range descriptions {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, descriptions[n])
	}
}

// Main runs the command line args (without the program name) until ctx is
// cancelled or the role ends, and returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	role := args[0]
	if _, ok := roles[role]; !ok {
		fmt.Fprintf(stderr, "outboxd: unknown role %q\n", role)
		usage(stderr)
		return ExitUsage
	}
	fs, o := newFlagSet(role)
	if err := config.Parse(fs, args[1:], nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "usage: outboxd %s [flags]\n  %s\n", role, descriptions[role])
			config.Usage(stderr, fs)
			return ExitOK
		}
		fmt.Fprintf(stderr, "outboxd %s: %v\n", role, err)
		return ExitUsage
	}
	if err := o.validate(); err != nil {
		fmt.Fprintf(stderr, "outboxd %s: %v\n", role, err)
		return ExitUsage
	}
	log, err := logging.New(o.logLevel, role == "dev")
	if err != nil {
		fmt.Fprintf(stderr, "outboxd %s: %v\n", role, config.Invalid("log-level", "%v", err))
		return ExitUsage
	}
	defer log.Sync() //nolint:errcheck
	a := &app{o: o, log: log, stdout: stdout}
	err = a.run(ctx)
	code := exitCode(err)
	if err != nil && !errors.Is(err, errSomeFailed) {
		fmt.Fprintf(stderr, "outboxd %s: %v\n", role, err)
	}
	return code
}

// exitCode maps a role's result to the process exit code: usage and
// configuration errors (a locked embedded store included) are 2, any other
// failure, including a sweep whose report lists failed documents, is 1.
func exitCode(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, config.ErrUsage), errors.Is(err, mongodb.ErrLocked):
		return ExitUsage
	default:
		return ExitFailure
	}
}

// errSomeFailed ends a run whose report already said what failed.
var errSomeFailed = errors.New("some documents failed")

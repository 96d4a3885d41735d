package runner

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/logging"
	"github.com/outboxd/outboxd/internal/tracing/instrument"
	"github.com/outboxd/outboxd/store"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// run is Run with no options: the stock binary.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runWith(ctx, args, stdout, stderr, &settings{})
}

// runWith runs the command line args (without the program name) with the
// options' settings s until ctx is cancelled or the role ends, and returns
// the exit code.
func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, s *settings) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	r, rest, ok := lookupRole(args)
	if !ok {
		fmt.Fprintf(stderr, "outboxd: unknown role %q\n", args[0])
		usage(stderr)
		return ExitUsage
	}
	fs, o := newFlagSet(r)
	if err := config.Parse(fs, rest, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "usage: outboxd %s [flags]\n  %s\n", r.name, r.summary)
			config.Usage(stderr, fs)
			return ExitOK
		}
		fmt.Fprintf(stderr, "outboxd %s: %v\n", r.name, err)
		return ExitUsage
	}
	o.args = argFlags(fs, rest)
	if err := cmp.Or(o.validate(), checkProjector(o, s)); err != nil {
		fmt.Fprintf(stderr, "outboxd %s: %v\n", r.name, err)
		return ExitUsage
	}
	log := s.logger
	if log == nil {
		var err error
		if log, err = logging.New(o.logLevel, r.name == "dev"); err != nil {
			fmt.Fprintf(stderr, "outboxd %s: %v\n", r.name, config.Invalid("log-level", "%v", err))
			return ExitUsage
		}
		defer func() { _ = log.Sync() }()
	}
	if r.store || r.redis || r.postgres {
		stopTracing, err := instrument.Setup(ctx, r.name, os.Getenv, log)
		if err != nil {
			fmt.Fprintf(stderr, "outboxd %s: %v\n", r.name, err)
			return ExitUsage
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := stopTracing(sctx); err != nil {
				log.Warn("tracing: spans not flushed at exit", zap.Error(err))
			}
		}()
	}
	a := &app{o: o, role: r, log: log, stdout: stdout, stderr: stderr, set: s}
	err := a.run(ctx)
	if err != nil && !errors.Is(err, errReported) {
		fmt.Fprintf(stderr, "outboxd %s: %v\n", r.name, err)
	}
	return exitCode(err)
}

// exitCode maps a role's result to the process exit code: usage and
// configuration errors (a missing schema and a file that is not a store
// included) are 2, any other failure, including a sweep whose report lists
// failed documents, is 1.
func exitCode(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, config.ErrUsage), errors.Is(err, store.ErrSchema):
		return ExitUsage
	default:
		return ExitFailure
	}
}

// errReported ends a run whose output already said what went wrong (a
// sweep's report, drift found by verify).
var errReported = errors.New("failure reported above")

// storeWording puts the command line's names into a store's error: the
// stores' errors name their options and call (Options.EventsTable,
// Store.Migrate), the command's user sets flags and runs commands.
var storeWording = strings.NewReplacer(
	"Options.EventsTable", "--events-collection",
	"Options.OutboxTable", "--outbox-collection",
	"Options.EventsCollection", "--events-collection",
	"Options.OutboxCollection", "--outbox-collection",
	"Options.Database", "--mongo-db",
	"Store.Migrate", "`outboxd migrate`",
)

// cliError is an error reworded for the command line, matching what the
// original matches (errors.Is, errors.As).
type cliError struct {
	msg string
	err error
}

func (e *cliError) Error() string { return e.msg }
func (e *cliError) Unwrap() error { return e.err }

// cliWording returns the store's err in the command line's names
// (storeWording), or err as it is when the program opened the store itself
// (runner.WithStore): its options are the program's, not the flags.
func (a *app) cliWording(err error) error {
	if err == nil || a.set.store != nil {
		return err
	}
	msg := storeWording.Replace(err.Error())
	if msg == err.Error() {
		return err
	}
	return &cliError{msg: msg, err: err}
}

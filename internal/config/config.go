// Package config reads command-line flags with OUTBOXD_* environment
// fallbacks and validates them up front, so a bad value stops the process
// with exit code 2 and a message that names the flag.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// ErrUsage is matched by every usage or configuration error (exit code 2).
var ErrUsage = errors.New("usage error")

// usageError is a usage error whose message is only its text; err, when
// set, is what it wraps (errors.As finds it).
type usageError struct {
	msg string
	err error
}

func (e *usageError) Error() string        { return e.msg }
func (e *usageError) Is(target error) bool { return target == ErrUsage }
func (e *usageError) Unwrap() error        { return e.err }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// Usagef returns a usage error (exit 2) with the formatted text; a %w in
// format wraps its error as fmt.Errorf does.
func Usagef(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &usageError{msg: err.Error(), err: errors.Unwrap(err)}
}

// EnvName returns the environment variable that backs flag name:
// "redis-url" → "OUTBOXD_REDIS_URL".
func EnvName(flagName string) string {
	return "OUTBOXD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args into fs, then fills every flag not given on the command
// line from its OUTBOXD_* variable. An invalid value names the flag and, when
// it came from the environment, the variable.
func Parse(fs *flag.FlagSet, args []string, lookupEnv func(string) (string, bool)) error {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || set[f.Name] {
			return
		}
		if v, ok := lookupEnv(EnvName(f.Name)); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = usagef("invalid value for --%s from %s: %v", f.Name, EnvName(f.Name), e)
			}
		}
	})
	return err
}

// Invalid returns a usage error for flag name.
func Invalid(name, format string, args ...any) error {
	return usagef("--%s %s", name, fmt.Sprintf(format, args...))
}

// Usage writes the flags of fs, with their environment variables, to w.
func Usage(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		def := ""
		if f.DefValue != "" {
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "  --%-18s %s%s [%s]\n", f.Name, f.Usage, def, EnvName(f.Name))
	})
}
